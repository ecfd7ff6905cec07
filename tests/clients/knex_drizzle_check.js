// Knex (3.x) and Drizzle ORM (0.45) over node-postgres.
// Knex: the schema builder (increments, a foreign key, decimal, jsonb, a native enum, a uuid
// default, an index and a unique pair), inserts with RETURNING, a join, sum/count with
// `.first()` (a LIMIT parameter), ALTER TABLE (a column added with a default, one renamed),
// columnInfo, a transaction, and its migrator (knex_migrations, its lock table).
// Drizzle: its migrator (a `DO $$ BEGIN ...; EXCEPTION WHEN duplicate_object THEN null; END
// $$` migration among them; journal in the public schema: Weir has no other), insert ...
// returning, a join with ORDER BY and LIMIT, count, update, delete with ON DELETE CASCADE,
// and the migrator again (nothing to do). Prints one line per step; tests/clients.rs
// compares them.
const path = require("path");

async function knexFlow(port) {
  const knex = require("knex")({
    client: "pg",
    connection: { host: "127.0.0.1", port, user: "weir", database: "weir" },
  });
  await knex.schema.createTable("k_owners", (t) => {
    t.increments("id");
    t.string("name").notNullable();
    t.timestamps(true, true);
  });
  await knex.schema.createTable("k_items", (t) => {
    t.bigIncrements("id");
    t.integer("owner_id").unsigned().references("id").inTable("k_owners").onDelete("CASCADE");
    t.decimal("price", 8, 2);
    t.jsonb("meta");
    t.enu("kind", ["a", "b"], { useNative: true, enumName: "k_kind" });
    t.uuid("ref").defaultTo(knex.raw("gen_random_uuid()"));
    t.index(["owner_id"]);
    t.unique(["owner_id", "kind"]);
  });
  console.log("knex created", await knex.schema.hasTable("k_items"), await knex.schema.hasColumn("k_items", "price"));
  const [o] = await knex("k_owners").insert({ name: "ann" }).returning("*");
  await knex("k_items").insert([
    { owner_id: o.id, price: 1.5, meta: { a: 1 }, kind: "a" },
    { owner_id: o.id, price: 2, kind: "b" },
  ]);
  const rows = await knex("k_items").join("k_owners", "k_items.owner_id", "k_owners.id")
    .select("k_items.price", "k_owners.name").orderBy("k_items.id");
  console.log("knex rows", JSON.stringify(rows));
  console.log("knex first", JSON.stringify(await knex("k_items").sum("price as total").count("* as n").first()));
  await knex.schema.alterTable("k_items", (t) => {
    t.string("note", 50).defaultTo("x");
    t.renameColumn("meta", "data");
  });
  console.log("knex columns", Object.keys(await knex("k_items").columnInfo()).sort().join(","));
  await knex.transaction(async (trx) => {
    await trx("k_owners").insert({ name: "bob" });
  });
  console.log("knex owners", (await knex("k_owners").count("* as c").first()).c);
  await knex.migrate.latest({ directory: path.join(__dirname, "knex_migrations") });
  console.log("knex migrated", (await knex("knex_migrations").select("name")).map((r) => r.name).join(","));
  await knex.destroy();
}

async function drizzleFlow(port) {
  const { drizzle } = require("drizzle-orm/node-postgres");
  const { migrate } = require("drizzle-orm/node-postgres/migrator");
  const { eq, sql, desc } = require("drizzle-orm");
  const { pgTable, serial, text, integer, timestamp, pgEnum, jsonb, uuid, numeric, boolean, varchar } =
    require("drizzle-orm/pg-core");
  const mood = pgEnum("d_mood", ["sad", "ok", "happy"]);
  const users = pgTable("d_users", {
    id: serial("id").primaryKey(),
    name: text("name").notNull(),
    email: varchar("email", { length: 256 }).unique(),
    mood: mood("mood").default("ok"),
    createdAt: timestamp("created_at", { withTimezone: true }).defaultNow().notNull(),
    meta: jsonb("meta"),
    score: numeric("score", { precision: 10, scale: 2 }),
    active: boolean("active").default(true),
  });
  const posts = pgTable("d_posts", {
    id: serial("id").primaryKey(),
    authorId: integer("author_id").references(() => users.id, { onDelete: "cascade" }),
    title: text("title").notNull(),
    ref: uuid("ref").defaultRandom(),
  });
  const { Pool } = require("pg");
  const pool = new Pool({ host: "127.0.0.1", port, user: "weir", database: "weir" });
  const db = drizzle(pool);
  // (the migrator keeps its journal in its own schema, "drizzle", by default)
  const folder = { migrationsFolder: path.join(__dirname, "drizzle") };
  await migrate(db, folder);
  console.log("drizzle migrated");
  const [u] = await db.insert(users).values({ name: "ann", email: "a@x", meta: { k: 1 }, score: "1.50" }).returning();
  console.log("drizzle inserted", u.id, u.mood, u.active, u.score, u.createdAt instanceof Date);
  await db.insert(posts).values([{ authorId: u.id, title: "p1" }, { authorId: u.id, title: "p2" }]);
  const rows = await db.select({ title: posts.title, name: users.name }).from(posts)
    .innerJoin(users, eq(posts.authorId, users.id)).orderBy(desc(posts.id)).limit(5);
  console.log("drizzle rows", JSON.stringify(rows));
  const [{ c }] = await db.select({ c: sql`count(*)`.mapWith(Number) }).from(posts);
  console.log("drizzle count", c);
  await db.update(users).set({ mood: "happy" }).where(eq(users.id, u.id));
  console.log("drizzle mood", (await db.select({ m: users.mood }).from(users))[0].m);
  await db.delete(users).where(eq(users.id, u.id));
  console.log("drizzle cascaded", (await db.select().from(posts)).length);
  await migrate(db, folder);
  console.log("drizzle migrated again");
  await pool.end();
}

(async () => {
  const port = +process.argv[2];
  await knexFlow(port);
  await drizzleFlow(port);
})().catch((e) => {
  console.log("FAILED", e.message, e.cause ? e.cause.message : "");
  process.exit(1);
});
