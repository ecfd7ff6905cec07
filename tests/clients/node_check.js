// Weir through node-postgres (pg): parameters, types, field metadata, savepoints, errors.
// Usage: node node_check.js PORT. Prints one line per check; the Rust test compares them.
const { Client } = require('pg');

(async () => {
  const c = new Client({ host: '127.0.0.1', port: +process.argv[2], user: 'weir', database: 'weir' });
  await c.connect();
  const r = await c.query('SELECT id, name, amount FROM nt WHERE id = $1', [2]);
  console.log('rows', JSON.stringify(r.rows));
  console.log('any', JSON.stringify((await c.query('SELECT id FROM nt WHERE id = ANY($1) ORDER BY id', [[1, 2, 5]])).rows));
  const oid = (await c.query("SELECT 'nt'::regclass::oid AS o")).rows[0].o;
  console.log('fields', r.fields.map(f => [f.name, f.dataTypeID, f.tableID === oid, f.columnID].join(':')).join(','));
  const t = await c.query("SELECT '2024-01-02 03:04:05'::timestamptz AS t, '{1,2}'::int[] AS a, true AS b, 1.5::float8 AS f, NULL::text AS n");
  const row = t.rows[0];
  console.log('types', row.t.toISOString(), JSON.stringify(row.a), row.b, row.f, row.n);
  await c.query('BEGIN');
  await c.query("INSERT INTO nt VALUES (10, 'kept', 1)");
  await c.query('SAVEPOINT a');
  await c.query("INSERT INTO nt VALUES (11, 'undone', 1)");
  try { await c.query('SELECT 1/0'); } catch (e) { console.log('error', e.code, e.message); }
  await c.query('ROLLBACK TO SAVEPOINT a');
  await c.query('COMMIT');
  console.log('after', JSON.stringify((await c.query('SELECT id FROM nt WHERE id >= 10 ORDER BY id')).rows));
  try { await c.query('SELECT * FROM missing'); } catch (e) { console.log('error', e.code, e.message); }
  // a Buffer goes in binary without a type; a bad value for an inferred type is 22P02
  const buf = (await c.query('SELECT $1::bytea AS b', [Buffer.from([0, 1, 255])])).rows[0].b;
  console.log('bytea', JSON.stringify([...buf]));
  try { await c.query('SELECT $1 * 2 AS x', [1.5]); } catch (e) { console.log('error', e.code, e.message); }
  // LIMIT / OFFSET parameters are bigints (Knex's .first(), Drizzle's .limit(n)); DEFAULT beside
  // parameters in VALUES (TypeORM's inserts)
  const page = await c.query('SELECT id FROM nt ORDER BY id LIMIT $1 OFFSET $2', [1, 1]);
  console.log('page', JSON.stringify(page.rows));
  await c.query('INSERT INTO nt (id, name, amount) VALUES ($1, $2, DEFAULT)', [12, 'defaulted']);
  console.log('default', JSON.stringify((await c.query('SELECT amount FROM nt WHERE id = $1', [12])).rows));
  await c.end();
})().catch(e => { console.error('FAILED', e.stack); process.exit(1); });
