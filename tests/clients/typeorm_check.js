// TypeORM (1.x) over node-postgres: synchronize creates the schema from entities (serial and
// uuid keys, a unique varchar, numeric(10,2), timestamptz, jsonb, text[], a foreign key with
// ON DELETE CASCADE, an index), the repository saves and loads with a relation, a query
// builder query runs with parameters, and a second synchronize reads the schema back
// through TypeORM's catalog queries (information_schema.columns joined to pg_attribute by a
// correlated subquery, ::regtype::text, pg_index, pg_constraint with UNNEST) and finds
// nothing to change. Prints one line per step; tests/clients.rs compares them.
require("reflect-metadata");
const { DataSource, EntitySchema } = require("typeorm");

const User = new EntitySchema({
  name: "User",
  tableName: "orm_users",
  columns: {
    id: { type: "int", primary: true, generated: "increment" },
    email: { type: "varchar", length: 200, unique: true },
    name: { type: "text", nullable: true },
    score: { type: "numeric", precision: 10, scale: 2, default: 0 },
    createdAt: { type: "timestamptz", createDate: true },
    meta: { type: "jsonb", nullable: true },
    uid: { type: "uuid", generated: "uuid" },
    active: { type: "boolean", default: true },
  },
  relations: { posts: { type: "one-to-many", target: "Post", inverseSide: "author" } },
  indices: [{ name: "orm_users_name_idx", columns: ["name"] }],
});
const Post = new EntitySchema({
  name: "Post",
  tableName: "orm_posts",
  columns: {
    id: { type: "int", primary: true, generated: "increment" },
    title: { type: "varchar" },
    tags: { type: "text", array: true, nullable: true },
  },
  relations: {
    author: { type: "many-to-one", target: "User", joinColumn: { name: "author_id" }, onDelete: "CASCADE" },
  },
});

const options = (port, synchronize) => ({
  type: "postgres", host: "127.0.0.1", port, username: "weir", database: "weir",
  entities: [User, Post], synchronize, logging: false,
});

(async () => {
  const port = +process.argv[2];
  const ds = new DataSource(options(port, true));
  await ds.initialize();
  console.log("synchronized");
  const users = ds.getRepository("User");
  const u = await users.save({ email: "ann@example.com", name: "ann", meta: { k: 1 } });
  console.log("saved", u.id, typeof u.uid === "string" && u.uid.length === 36, u.createdAt instanceof Date, u.score, u.active);
  await ds.getRepository("Post").save({ title: "hello", tags: ["a", "b"], author: u });
  const got = await users.find({ relations: { posts: true }, where: { email: "ann@example.com" } });
  console.log("found", JSON.stringify(got[0].posts), JSON.stringify(got[0].meta));
  const n = await ds.getRepository("Post").createQueryBuilder("p")
    .innerJoin("p.author", "a").where("a.name = :name", { name: "ann" }).getCount();
  console.log("query builder", n);
  await users.delete({ id: u.id });
  console.log("cascaded", await ds.getRepository("Post").count());
  await ds.destroy();
  const again = new DataSource(options(port, false));
  await again.initialize();
  const pending = await again.driver.createSchemaBuilder().log();
  console.log("pending", JSON.stringify(pending.upQueries.map((q) => q.query)));
  await again.destroy();
})().catch((e) => {
  console.log("FAILED", e.message, e.query || "");
  process.exit(1);
});
