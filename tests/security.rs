//! Who gets in, tested with real clients against the real binary: SCRAM-SHA-256 passwords
//! (psql, psycopg 3, pgJDBC, node-postgres), `\password`, pg_hba-style rules (`hostssl`,
//! `reject`, `cert`), TLS with `sslmode=verify-full` against a CA the test makes with
//! `openssl`, client certificates mapped to roles by CN, the refusal to listen beyond
//! loopback without authentication, and no password or secret in clear text anywhere in
//! the data directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Options, TestServer};

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate for
/// `carol`, made with the openssl command line.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("weir-pki-")
            .tempdir()
            .expect("temp dir");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl must be installed");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("client.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
        )
        .expect("write");
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=Weir Test CA",
        ]);
        for (name, cn, ext) in [
            ("server", "localhost", "server.ext"),
            ("carol", "carol", "client.ext"),
        ] {
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-extfile",
                ext,
            ]);
        }
        // libpq refuses a client key others can read
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            dir.path().join("carol.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("chmod");
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// psql with a connection string and an optional password; (success, stdout, stderr).
fn psql(conn: &str, password: Option<&str>, commands: &[&str]) -> (bool, String, String) {
    psql_with_input(conn, password, commands, None)
}

fn psql_with_input(
    conn: &str,
    password: Option<&str>,
    commands: &[&str],
    input: Option<&str>,
) -> (bool, String, String) {
    let mut cmd = Command::new("psql");
    cmd.arg("-X").arg(conn).args(["-v", "ON_ERROR_STOP=1"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    cmd.env("PGCONNECT_TIMEOUT", "10").env_remove("PGPASSWORD");
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .expect("psql must be installed (make test installs postgresql-client)");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(i) = input {
            stdin.write_all(i.as_bytes()).expect("psql stdin");
        }
    }
    let out = child.wait_with_output().expect("psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn conn(port: u16, user: &str, extra: &str) -> String {
    format!("host=localhost port={port} user={user} dbname=weir {extra}")
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

fn run(cmd: &mut Command, what: &str, server: &TestServer) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
    stdout
}

const HBA: &str = "# rules for the test
hostssl all carol 127.0.0.1/32 cert
hostnossl all tlsonly all reject
hostssl all tlsonly 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_rules_and_tls_with_real_clients() {
    let pki = Pki::new();
    std::fs::write(pki.dir.path().join("hba.conf"), HBA).expect("hba");
    let (cert, key, ca, hba) = (
        pki.path("server.pem"),
        pki.path("server.key"),
        pki.path("ca.pem"),
        pki.path("hba.conf"),
    );
    let server = TestServer::start_with(Options {
        env: &[("WEIR_SUPERUSER_PASSWORD", "root-Pw-1")],
        args: &[
            "--superuser",
            "root",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
            "--hba-file",
            &hba,
        ],
        ..Default::default()
    });
    let port = server.port();
    let verify = format!("sslmode=verify-full sslrootcert={ca}");

    // the bootstrap superuser and its password from the environment
    let (ok, out, err) = psql(
        &conn(port, "root", "sslmode=disable"),
        Some("root-Pw-1"),
        &[
            "CREATE ROLE alice LOGIN PASSWORD 'alice-Pw-1'",
            "CREATE ROLE carol LOGIN",
            "CREATE ROLE tlsonly LOGIN PASSWORD 'tls-Pw-1'",
            "CREATE ROLE readers",
            "GRANT readers TO alice",
            "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)",
            "INSERT INTO t VALUES (1, 'one')",
            "CREATE TABLE hidden (secret_column TEXT)",
            "GRANT SELECT ON t TO readers",
            "SELECT current_user, session_user",
        ],
    );
    assert!(ok, "{err}\n{}", server.log_tail());
    assert!(out.contains(" root         | root\n"), "{out}");

    // right password in
    let (ok, out, err) = psql(
        &conn(port, "alice", "sslmode=disable"),
        Some("alice-Pw-1"),
        &["SELECT current_user, v FROM t"],
    );
    assert!(ok, "{err}");
    assert!(out.contains(" alice        | one\n"), "{out}");
    // wrong password out, after the failed-login delay; an unknown role gets the same words
    for (user, password) in [("alice", "wrong"), ("mallory", "whatever"), ("carol", "x")] {
        let started = Instant::now();
        let (ok, _, err) = psql(
            &conn(port, user, "sslmode=disable"),
            Some(password),
            &["SELECT 1"],
        );
        assert!(!ok);
        assert!(
            err.contains(&format!(
                "FATAL:  password authentication failed for user \"{user}\""
            )),
            "{user}: {err}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "a failed login is answered after a delay"
        );
    }
    // failures from one address are answered one after another: six guesses at once take
    // six delays, not one
    let started = Instant::now();
    let guesses: Vec<_> = (0..6)
        .map(|i| {
            let c = conn(port, "alice", "sslmode=disable");
            std::thread::spawn(move || psql(&c, Some(&format!("guess-{i}")), &["SELECT 1"]).0)
        })
        .collect();
    for g in guesses {
        assert!(!g.join().expect("guess"));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(2800),
        "parallel guesses from one address took {:?}",
        started.elapsed()
    );
    let log = std::fs::read_to_string(server.log_path()).expect("log");
    assert!(log.contains("login failed") && log.contains("user=\"mallory\""));
    assert!(
        !log.contains("whatever") && !log.contains("alice-Pw-1"),
        "no password in the log"
    );

    // hostssl: the same role is refused over plain TCP and let in over TLS
    let (ok, _, err) = psql(
        &conn(port, "tlsonly", "sslmode=disable"),
        Some("tls-Pw-1"),
        &["SELECT 1"],
    );
    assert!(!ok);
    assert!(
        err.contains("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"tlsonly\""),
        "{err}"
    );
    let (ok, out, err) = psql(
        &conn(port, "tlsonly", &verify),
        Some("tls-Pw-1"),
        &[
            "SHOW ssl",
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains(" on\n"), "{out}");
    assert!(out.contains(" t   | TLSv1.3\n"), "{out}");

    // cert: the certificate's CN is the role; no certificate, no entry
    let with_cert = format!(
        "{verify} sslcert={} sslkey={}",
        pki.path("carol.pem"),
        pki.path("carol.key")
    );
    let (ok, out, err) = psql(
        &conn(port, "carol", &with_cert),
        None,
        &[
            "SELECT current_user, client_dn, issuer_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ],
    );
    assert!(ok, "{err}\n{}", server.log_tail());
    assert!(
        out.contains(" carol        | /CN=carol | /CN=Weir Test CA\n"),
        "{out}"
    );
    let (ok, _, err) = psql(&conn(port, "carol", &verify), None, &["SELECT 1"]);
    assert!(!ok);
    assert!(
        err.contains("connection requires a valid client certificate"),
        "{err}"
    );
    // a certificate for carol does not let anyone be alice
    let (ok, _, _) = psql(&conn(port, "alice", &with_cert), None, &["SELECT 1"]);
    assert!(
        !ok,
        "alice needs her password even with carol's certificate"
    );

    // \password sends a verifier computed by psql; the new password works, the old does not
    let (ok, _, err) = psql_with_input(
        &conn(port, "alice", &verify),
        Some("alice-Pw-1"),
        &["\\password"],
        Some("alice-Pw-2\nalice-Pw-2\n"),
    );
    assert!(ok, "\\password: {err}");
    let (ok, _, _) = psql(
        &conn(port, "alice", &verify),
        Some("alice-Pw-1"),
        &["SELECT 1"],
    );
    assert!(!ok, "the old password is gone");
    let (ok, out, err) = psql(
        &conn(port, "alice", &verify),
        Some("alice-Pw-2"),
        &["SELECT current_user"],
    );
    assert!(ok && out.contains("alice"), "{err}");

    // \du and \dp
    let (ok, out, err) = psql(
        &conn(port, "root", &verify),
        Some("root-Pw-1"),
        &["\\du", "\\dp t"],
    );
    assert!(ok, "{err}");
    for line in [
        " alice     |                                                            | {readers}",
        " readers   | Cannot login                                               | ",
        " root      | Superuser, Create role, Create DB, Replication, Bypass RLS | ",
        " public | t    | table | root=arwdDxt/root+|                   | ",
        "        |      |       | readers=r/root    |                   | ",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }

    // psycopg 3 with verify-full against the test CA; a wrong password is refused
    let script = format!(
        r#"
import psycopg
dsn = "host=localhost port={port} dbname=weir user=alice sslmode=verify-full sslrootcert={ca}"
with psycopg.connect(dsn, password="alice-Pw-2") as c:
    cur = c.execute("SELECT current_user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    print("psycopg", *cur.fetchone())
    print("ssl", c.execute("SHOW ssl").fetchone()[0])
    try:
        c.execute("INSERT INTO t VALUES (2, 'no')")
    except psycopg.errors.InsufficientPrivilege as e:
        print("denied", e.sqlstate)
try:
    psycopg.connect(dsn, password="nope")
except psycopg.OperationalError as e:
    print("refused", "password authentication failed" in str(e))
"#
    );
    let out = run(
        Command::new("python3").args(["-c", &script]),
        "psycopg",
        &server,
    );
    assert_eq!(
        out,
        "psycopg alice True\nssl on\ndenied 42501\nrefused True\n"
    );

    // the extended protocol: a statement over a relation the role may not read is refused
    // at Parse/Describe, before its columns are described
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=alice password=alice-Pw-2 dbname=weir"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("tokio-postgres with SCRAM");
    tokio::spawn(connection);
    client.prepare("SELECT v FROM t").await.expect("readable");
    let e = client
        .prepare("SELECT * FROM hidden")
        .await
        .expect_err("not readable");
    let db = e.as_db_error().expect("db error");
    assert_eq!(db.code().code(), "42501");
    assert_eq!(db.message(), "permission denied for table hidden");

    // pgJDBC with SCRAM over TLS (ssl=true, verify-full)
    let jar = "/usr/share/java/postgresql.jar";
    let classes = tempfile::tempdir().expect("temp dir");
    run(
        Command::new("javac").args([
            "-cp",
            jar,
            "-d",
            &classes.path().display().to_string(),
            &clients_dir()
                .join("JdbcSecurity.java")
                .display()
                .to_string(),
        ]),
        "javac JdbcSecurity.java",
        &server,
    );
    let out = run(
        Command::new("java").args([
            "-cp",
            &format!("{jar}:{}", classes.path().display()),
            "JdbcSecurity",
            &port.to_string(),
            &ca,
        ]),
        "JdbcSecurity",
        &server,
    );
    assert_eq!(out, "jdbc|alice|true\nwrong|28P01\nunknown|28P01\n");

    // node-postgres with SCRAM
    let out = run(
        Command::new("node")
            .arg(clients_dir().join("node_security.js"))
            .arg(port.to_string())
            .arg(&ca)
            .env("NODE_PATH", home().join(".cache/weir-node/node_modules")),
        "node_security.js",
        &server,
    );
    assert_eq!(
        out,
        "node alice 1\nwrong 28P01\ndenied 42501\ntls true TLSv1.3\n"
    );
}

#[test]
fn non_loopback_listen_without_authentication_refuses_to_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let serve = |extra: &[&str], env: &[(&str, &str)], data: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.args(["serve", "--listen", "0.0.0.0:0", "--http-listen", "off"])
            .arg("--data-dir")
            .arg(dir.path().join(data))
            .args(extra)
            .env_remove("WEIR_SUPERUSER_PASSWORD")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let out = serve(&[], &[], "a").output().expect("weir");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without authentication")
            && err.contains("--insecure"),
        "{err}"
    );
    // each way to configure authentication (or --insecure) lets it start
    let pw_file = dir.path().join("pw");
    std::fs::write(&pw_file, "from-a-file\n").expect("write");
    let pw_file = pw_file.display().to_string();
    for (extra, env, data) in [
        (
            vec!["--superuser-password-file", pw_file.as_str()],
            vec![],
            "f",
        ),
        (vec!["--insecure"], vec![], "b"),
        (vec![], vec![("WEIR_SUPERUSER_PASSWORD", "pw-1")], "c"),
        (
            vec!["--hba", "host all all 0.0.0.0/0 scram-sha-256"],
            vec![],
            "d",
        ),
    ] {
        let mut child = serve(&extra, &env, data).spawn().expect("weir");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        use std::io::BufRead as _;
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            line.starts_with("listening on "),
            "{extra:?} {env:?}: {line}"
        );
    }
    // a malformed rule stops the start with a message naming it
    let out = serve(&["--hba", "host all all 10.0.0.0/40 trust"], &[], "e")
        .output()
        .expect("weir");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad address range"));
}

/// Every byte the server wrote under its data directory, after a password (at first start
/// and with CREATE ROLE) and a secret: none of them is there in clear text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_or_secret_in_clear_text_in_the_data_dir() {
    const ROOT_PW: &str = "R00t-pw-4e5f9a";
    const ROLE_PW: &str = "Pa55word-9c2d1b";
    const SECRET: &str = "S3cret-Value-7f1e0c";
    let mut server = TestServer::start_with(Options {
        env: &[("WEIR_SUPERUSER_PASSWORD", ROOT_PW)],
        ..Default::default()
    });
    let port = server.port();
    let (ok, _, err) = psql(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        Some(ROOT_PW),
        &[
            &format!("CREATE ROLE app LOGIN PASSWORD '{ROLE_PW}'"),
            &format!("CREATE SECRET kafka_pw AS '{SECRET}'"),
            "CREATE SECRET other AS 'x'",
            &format!("ALTER SECRET other AS '{SECRET}'"),
            "CHECKPOINT",
        ],
    );
    assert!(ok, "{err}\n{}", server.log_tail());
    // a secret is used by name; one that does not exist is named in the error
    let (ok, _, err) = psql(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        Some(ROOT_PW),
        &[
            "CREATE SOURCE s (a INT) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '127.0.0.1:1', properties.sasl.password = SECRET nosuch) FORMAT PLAIN ENCODE JSON",
        ],
    );
    assert!(
        !ok && err.contains("secret \"nosuch\" does not exist"),
        "{err}"
    );
    server.kill();
    let data = server.data_dir();
    let mut files = Vec::new();
    let mut todo = vec![data.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 3, "{files:?}");
    let needles = [ROOT_PW, ROLE_PW, SECRET];
    for f in &files {
        let bytes = std::fs::read(f).expect("read");
        for n in needles {
            assert!(
                !bytes.windows(n.len()).any(|w| w == n.as_bytes()),
                "{} holds {n} in clear text",
                f.display()
            );
        }
    }
    // the generated secrets key is readable by its owner only
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(data.join("secrets.key"))
        .expect("secrets.key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // and the secret survives a restart (sealed with that key)
    server.restart();
    let (ok, out, err) = psql(
        &format!(
            "host=127.0.0.1 port={} user=weir dbname=weir",
            server.port()
        ),
        Some(ROOT_PW),
        &[
            "SELECT rolname FROM pg_roles WHERE rolname = 'app'",
            "DROP SECRET kafka_pw",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains(" app\n"), "{out}");
}

/// `--superuser NAME` and `--superuser-password-file` at the first start, and
/// `--secrets-key-file`: the named file's key seals secrets (none is generated in the data
/// directory), and without it the server cannot read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superuser_flags_and_secrets_key_file() {
    let keys = tempfile::tempdir().expect("temp dir");
    let key = keys.path().join("weir.key");
    std::fs::write(&key, format!("{}\n", "5a".repeat(32))).expect("key");
    let pw = keys.path().join("pw");
    std::fs::write(&pw, "Adm1n-pw\n").expect("pw");
    let (key_s, pw_s) = (key.display().to_string(), pw.display().to_string());
    let mut server = TestServer::start_with(Options {
        args: &[
            "--superuser",
            "admin",
            "--superuser-password-file",
            &pw_s,
            "--secrets-key-file",
            &key_s,
        ],
        ..Default::default()
    });
    let c = |s: &TestServer| format!("host=127.0.0.1 port={} user=admin dbname=weir", s.port());
    // a password is set: loopback is no longer trusted
    let (ok, _, err) = psql(&c(&server), None, &["SELECT 1"]);
    assert!(!ok && err.contains("no password supplied"), "{err}");
    let (ok, out, err) = psql(
        &c(&server),
        Some("Adm1n-pw"),
        &[
            "CREATE SECRET s AS 'v1'",
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains(" admin        | t\n"), "{out}");
    assert!(!server.data_dir().join("secrets.key").exists());
    // the flags apply at the first start only: later ones change nothing
    server.restart();
    let (ok, out, err) = psql(
        &c(&server),
        Some("Adm1n-pw"),
        &[
            "ALTER SECRET s AS 'v2'",
            "SELECT count(*) FROM pg_roles WHERE rolname NOT LIKE 'pg\\_%'",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("     1\n"), "{out}");
}
