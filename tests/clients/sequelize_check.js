// Sequelize (6.x) over node-postgres: sync({ force }) creates the tables (an ENUM through
// Sequelize's `DO 'BEGIN CREATE TYPE ...; EXCEPTION WHEN duplicate_object THEN null; END'`,
// serial keys on mixed-case tables, varchar[], jsonb, uuid, a foreign key), create, include,
// update, count, sync({ alter }) (ALTER COLUMN ... TYPE an enum USING a cast to it, its
// index queries' name[] arrays), describeTable, a rolled-back transaction. Prints one line
// per step; tests/clients.rs compares them.
const { Sequelize, DataTypes, Op } = require("sequelize");

(async () => {
  const port = +process.argv[2];
  const sq = new Sequelize("weir", "weir", "", { host: "127.0.0.1", port, dialect: "postgres", logging: false });
  const User = sq.define("User", {
    name: { type: DataTypes.STRING, allowNull: false },
    email: { type: DataTypes.STRING, unique: true },
    age: DataTypes.INTEGER,
    balance: { type: DataTypes.DECIMAL(10, 2), defaultValue: 0 },
    tags: DataTypes.ARRAY(DataTypes.STRING),
    profile: DataTypes.JSONB,
    role: DataTypes.ENUM("admin", "user"),
    uid: { type: DataTypes.UUID, defaultValue: DataTypes.UUIDV4 },
  });
  const Task = sq.define("Task", {
    title: DataTypes.STRING,
    done: { type: DataTypes.BOOLEAN, defaultValue: false },
  });
  User.hasMany(Task);
  Task.belongsTo(User);
  await sq.sync({ force: true });
  console.log("synced");
  const u = await User.create({ name: "ann", email: "a@x", age: 30, tags: ["x"], profile: { a: 1 }, role: "admin" });
  await Task.create({ title: "t1", UserId: u.id });
  await Task.bulkCreate([{ title: "t2", UserId: u.id }, { title: "t3", UserId: u.id, done: true }]);
  const found = await User.findAll({
    include: Task,
    where: { age: { [Op.gte]: 18 } },
    order: [["id", "ASC"], [Task, "id", "ASC"]],
  });
  console.log("found", found.length, found[0].Tasks.map((t) => t.title).join(","), found[0].role, found[0].balance, JSON.stringify(found[0].tags));
  const [n] = await Task.update({ done: true }, { where: { title: { [Op.like]: "t%" } } });
  console.log("updated", n, await Task.count({ where: { done: true } }));
  await sq.sync({ alter: true });
  console.log("altered");
  const columns = await sq.getQueryInterface().describeTable("Users");
  console.log("described", Object.keys(columns).sort().join(","), columns.role.type, JSON.stringify(columns.role.special));
  const t = await sq.transaction();
  await User.create({ name: "bob" }, { transaction: t });
  await t.rollback();
  console.log("users", await User.count());
  await sq.close();
})().catch((e) => {
  console.log("FAILED", e.message, e.sql || "");
  process.exit(1);
});
