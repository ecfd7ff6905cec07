// Weir through node-postgres (pg) with SCRAM-SHA-256: the right password in, a wrong one
// out (28P01), a privilege error (42501), and TLS verified against the test's CA.
// Usage: node node_security.js PORT CA_PEM.
const fs = require('fs');
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
  // verify-full: the CA checks the certificate and the host name must match it
  const tls = new Client({ host: 'localhost', port, user: 'alice', password: 'alice-Pw-2', database: 'weir',
                           ssl: { ca: fs.readFileSync(process.argv[3]), rejectUnauthorized: true } });
  await tls.connect();
  const s = await tls.query('SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
  console.log('tls', s.rows[0].ssl, s.rows[0].version);
  await tls.end();
})().catch(e => { console.error('FAILED', e.stack); process.exit(1); });
