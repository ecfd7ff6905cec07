exports.up = (knex) => knex.schema.createTable("k_notes", (t) => { t.increments(); t.text("body"); });
exports.down = (knex) => knex.schema.dropTable("k_notes");
