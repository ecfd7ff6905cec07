// Weir through node-postgres (pg) with SCRAM-SHA-256: the right password in, a wrong one
// out (28P01), a privilege error (42501). Usage: node node_security.js PORT.
const { Client } = require('pg');

(async () => {
  const port = +process.argv[2];
  const c = new Client({ host: '127.0.0.1', port, user: 'alice', password: 'alice-Pw-2', database: 'weir' });
  await c.connect();
  const r = await c.query('SELECT current_user AS u, count(*)::int AS n FROM t');
  console.log('node', r.rows[0].u, r.rows[0].n);
  const bad = new Client({ host: '127.0.0.1', port, user: 'alice', password: 'nope', database: 'weir' });
  try { await bad.connect(); console.log('wrong connected'); } catch (e) { console.log('wrong', e.code); }
  try { await c.query("DELETE FROM t"); } catch (e) { console.log('denied', e.code); }
  await c.end();
})().catch(e => { console.error('FAILED', e.stack); process.exit(1); });
