"""Weir through Python's Postgres drivers: psycopg2, psycopg 3 and SQLAlchemy's inspector.

Usage: python_clients.py PORT [all|sqlalchemy]. Every check asserts real answers; the
first failure raises (non-zero exit). Prints one `ok <check>` line per passed check.
"""

import collections
import io
import subprocess
import sys
import threading
import time

PORT = int(sys.argv[1])
WHAT = sys.argv[2] if len(sys.argv) > 2 else "all"
DSN = f"host=127.0.0.1 port={PORT} user=weir dbname=weir"


def ok(name):
    print("ok", name, flush=True)


def setup():
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(
            "CREATE TABLE orders (id INT PRIMARY KEY, customer VARCHAR(20) NOT NULL, "
            "amount NUMERIC(10,2), placed TIMESTAMP)"
        )
        c.execute(
            "CREATE MATERIALIZED VIEW per_customer AS "
            "SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer"
        )


def check_psycopg2():
    import psycopg2

    c = psycopg2.connect(DSN)
    cur = c.cursor()
    cur.execute(
        "INSERT INTO orders VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)",
        (1, "ann", 10.5, "2024-01-01 10:00:00", 2, "bob", None, None),
    )
    c.commit()
    cur.execute("SELECT id, customer, amount FROM orders ORDER BY id")
    rows = cur.fetchall()
    assert [(r[0], r[1], None if r[2] is None else float(r[2])) for r in rows] == [
        (1, "ann", 10.5),
        (2, "bob", None),
    ], rows
    assert [d.name for d in cur.description] == ["id", "customer", "amount"]
    ok("psycopg2 query")

    # COPY in both formats, both directions
    cur.copy_expert(
        "COPY orders FROM STDIN", io.StringIO("3\tcat\t1.25\t\\N\n4\tdan\\tdee\t2\t2024-02-03 04:05:06\n")
    )
    cur.copy_expert(
        "COPY orders (id, customer) FROM STDIN (FORMAT csv, HEADER)",
        io.StringIO('id,customer\n5,"e,ve"\n6,""\n'),
    )
    c.commit()
    out = io.StringIO()
    cur.copy_expert("COPY (SELECT id, customer, amount FROM orders ORDER BY id) TO STDOUT", out)
    assert out.getvalue() == (
        "1\tann\t10.50\n2\tbob\t\\N\n3\tcat\t1.25\n4\tdan\\tdee\t2.00\n5\te,ve\t\\N\n6\t\t\\N\n"
    ), out.getvalue()
    out = io.StringIO()
    cur.copy_expert("COPY orders (id, customer) TO STDOUT WITH CSV HEADER", out)
    got = sorted(out.getvalue().splitlines()[1:])
    assert out.getvalue().splitlines()[0] == "id,customer"
    assert got == ['1,ann', '2,bob', '3,cat', '4,dan\tdee', '5,"e,ve"', '6,""'], got
    # options: delimiter, NULL string, quote and escape characters, both directions
    cur.copy_expert(
        "COPY orders (id, customer, amount) FROM STDIN "
        "(FORMAT csv, DELIMITER ';', NULL 'NA', QUOTE '''', ESCAPE '\\')",
        io.StringIO("50;'semi;colon';NA\n51;'it\\'s';3.5\n"),
    )
    out = io.StringIO()
    cur.copy_expert(
        "COPY (SELECT id, customer, amount FROM orders WHERE id >= 50 AND id < 60 ORDER BY id) "
        "TO STDOUT WITH (FORMAT csv, DELIMITER '|', NULL 'NA')",
        out,
    )
    assert out.getvalue() == "50|semi;colon|NA\n51|it's|3.50\n", out.getvalue()
    cur.execute("DELETE FROM orders WHERE id >= 50 AND id < 60")
    c.commit()
    ok("psycopg2 copy")

    # a bad row fails the whole COPY and names the line
    try:
        cur.copy_expert("COPY orders FROM STDIN", io.StringIO("7\tfay\t1\t\\N\n8\tgus\tlots\t\\N\n"))
        raise AssertionError("bad COPY data was accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "22P02", e.pgcode
        assert "line 2" in (e.diag.context or ""), e.diag.context
    c.rollback()
    cur.execute("SELECT count(*) FROM orders")
    assert cur.fetchone()[0] == 6
    ok("psycopg2 copy error")

    # a named cursor over SUBSCRIBE: DECLARE ... FETCH in a transaction
    cur.execute("FLUSH")
    named = c.cursor("changes")
    named.execute("SUBSCRIBE per_customer")
    snapshot = named.fetchmany(100)
    assert sorted((r[2], r[1]) for r in snapshot) == sorted(
        [("ann", 1), ("bob", 1), ("cat", 1), ("dan\tdee", 1), ("e,ve", 1), ("", 1)]
    ), snapshot
    w = psycopg2.connect(DSN)
    w.autocommit = True
    w.cursor().execute("INSERT INTO orders VALUES (7, 'ann', 1, NULL)")
    change = named.fetchmany(100)
    assert sorted((r[1], r[2], r[3]) for r in change) == [(-1, "ann", 1), (1, "ann", 2)], change
    named.close()
    c.rollback()
    w.close()
    c.close()
    ok("psycopg2 named cursor subscribe")


def check_psycopg3():
    import psycopg

    conn = psycopg.connect(DSN, autocommit=True)
    conn.execute("FLUSH")

    # lists as = ANY(%s): typed (int4[]) and untyped (str) array parameters
    ids = conn.execute("SELECT id FROM orders WHERE id = ANY(%s) ORDER BY id", [[1, 3, 99]]).fetchall()
    assert ids == [(1,), (3,)], ids
    names = conn.execute(
        "SELECT customer FROM orders WHERE customer = ANY(%s) ORDER BY 1", [["bob", "cat"]]
    ).fetchall()
    assert names == [("bob",), ("cat",)], names
    ok("psycopg any list")

    # an error's position through the extended protocol (psycopg 3 sends Parse/Bind/Execute):
    # the missing column, the unreadable parameterless literal, a syntax error's token
    for sql, where in [
        ("SELECT nosuch FROM orders WHERE id = %s", 8),
        ("SELECT id FROM orders WHERE id = 'x1' AND id = %s", 34),
        ("SELECT id FROM orders WHERE id = %s +", None),
    ]:
        try:
            conn.execute(sql, [1])
            raise AssertionError(f"{sql} should fail")
        except psycopg.Error as e:
            got = e.diag.statement_position
            if where is None:
                assert e.sqlstate == "42601" and got is not None, (sql, e.sqlstate, got)
            else:
                assert got == str(where), (sql, got, e.diag.message_primary)
    ok("psycopg error positions")

    # uuid: Python UUIDs in and out, as text and as binary parameters, and in lists
    import uuid

    conn.execute("CREATE TABLE py_uuid (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), n int)")
    u = uuid.UUID("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11")
    conn.execute("INSERT INTO py_uuid VALUES (%s, 1)", [u])
    conn.cursor(binary=True).execute("INSERT INTO py_uuid VALUES (%b, 2)", [uuid.UUID(int=7)])
    conn.execute("INSERT INTO py_uuid (n) VALUES (3)")
    got = conn.execute("SELECT id, n FROM py_uuid WHERE id = %s", [u]).fetchall()
    assert got == [(u, 1)], got
    got = conn.cursor(binary=True).execute("SELECT id FROM py_uuid WHERE n = %b", [2]).fetchall()
    assert got == [(uuid.UUID(int=7),)], got
    got = conn.execute("SELECT n FROM py_uuid WHERE id = ANY(%s) ORDER BY n", [[u, uuid.UUID(int=7)]]).fetchall()
    assert got == [(1,), (2,)], got
    (generated,) = conn.execute("SELECT id FROM py_uuid WHERE n = 3").fetchone()
    assert isinstance(generated, uuid.UUID) and generated.version == 4, generated
    conn.execute("DROP TABLE py_uuid")
    ok("psycopg uuid")

    # numbers bound wider than their place: a float or a Decimal times an integer constant
    # stays a float or a numeric (the planner typed `%s * 2` an integer: 1.5 became 2), a
    # Decimal with an exponent reads as Postgres reads it
    import decimal

    got = conn.execute("SELECT %s * 2, %s * 2, %s * 2", (1.5, decimal.Decimal("1.5"), decimal.Decimal("1E+2"))).fetchone()
    assert got == (3.0, decimal.Decimal("3"), decimal.Decimal("200")), got
    (big,) = conn.execute("SELECT %s + 1", (2**70,)).fetchone()
    assert big == 2**70 + 1, big
    ok("psycopg float and Decimal parameters keep their types")

    # dates, timestamps, intervals, uuids and ints bound where the place alone would type
    # them otherwise (`%s + interval`: an interval; `SELECT %s`: text)
    import datetime

    got = conn.execute(
        "SELECT %s + interval '1 day', %s + interval '1 hour', %s - 1, %s * 2, %s, %s",
        (
            datetime.date(2024, 1, 31),
            datetime.datetime(2024, 1, 31, 10, 0),
            datetime.date(2024, 3, 1),
            datetime.timedelta(hours=1, minutes=30),
            uuid.UUID(int=5),
            7,
        ),
    ).fetchone()
    assert got == (
        datetime.datetime(2024, 2, 1, 0, 0),
        datetime.datetime(2024, 1, 31, 11, 0),
        datetime.date(2024, 2, 29),
        datetime.timedelta(hours=3),
        uuid.UUID(int=5),
        7,
    ), got
    ok("psycopg date, timestamp, interval, uuid and int parameters keep their types")

    # lists of str (sent untyped, as array text) into text[] columns, also by executemany;
    # array operators beside such a list; ON CONFLICT with parameters in its clause
    conn.execute("CREATE TABLE py_pa (id int PRIMARY KEY, tags text[], amt numeric)")
    conn.execute("INSERT INTO py_pa VALUES (%s, %s, %s)", (1, ["x", "y"], 1))
    conn.cursor().executemany(
        "INSERT INTO py_pa VALUES (%s, %s, %s)", [(2, ["a", "b,c", None, 'q"r'], 2)]
    )
    got = conn.execute("SELECT id, tags FROM py_pa ORDER BY id").fetchall()
    assert got == [(1, ["x", "y"]), (2, ["a", "b,c", None, 'q"r'])], got
    got = conn.execute("SELECT id FROM py_pa WHERE tags && %s ORDER BY id", (["x", "b,c"],)).fetchall()
    assert got == [(1,), (2,)], got
    got = conn.execute(
        "INSERT INTO py_pa AS t (id, amt) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE "
        "SET amt = t.amt * %s WHERE t.amt < %s RETURNING t.id, t.amt",
        (1, 5, decimal.Decimal("2"), 100),
    ).fetchall()
    assert got == [(1, decimal.Decimal("2"))], got
    got = conn.execute(
        "INSERT INTO py_pa (id, tags) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE "
        "SET tags = excluded.tags || %s RETURNING tags",
        (2, ["z"], ["w"]),
    ).fetchall()
    assert got == [(["z", "w"],)], got
    conn.execute("DROP TABLE py_pa")
    ok("psycopg lists of str, array operators and ON CONFLICT with parameters")

    # binary parameters: arrays (array_recv's format) of text, ints with NULLs, dates
    conn.execute("CREATE TABLE py_pb (t text[], n int[], d date[])")
    b = conn.cursor(binary=True)
    b.execute(
        "INSERT INTO py_pb VALUES (%b, %b, %b)",
        (["a b", 'q"r', "s\\t", None, ""], [1, None, 3], [datetime.date(2024, 1, 1)]),
    )
    got = conn.execute("SELECT t, n, d FROM py_pb").fetchone()
    assert got == (["a b", 'q"r', "s\\t", None, ""], [1, None, 3], [datetime.date(2024, 1, 1)]), got
    (hit,) = b.execute("SELECT 3 = ANY(%b)", ([1, 2, 3],)).fetchone()
    assert hit is True, hit
    conn.execute("DROP TABLE py_pb")
    ok("psycopg binary array parameters")

    # ::regclass on a bound parameter gives the table's pg_class OID
    (oid,) = conn.execute("SELECT %s::regclass::oid", ["orders"]).fetchone()
    (relname,) = conn.execute("SELECT relname FROM pg_class WHERE oid = %s", [oid]).fetchone()
    assert relname == "orders", (oid, relname)
    ok("psycopg regclass parameter")

    # nested transactions are savepoints
    with conn.transaction():
        conn.execute("INSERT INTO orders VALUES (100, 'sp', 1, NULL)")
        try:
            with conn.transaction():
                conn.execute("INSERT INTO orders VALUES (101, 'sp', 1, NULL)")
                conn.execute("INSERT INTO orders VALUES (100, 'dup', 1, NULL)")
        except psycopg.errors.UniqueViolation:
            pass
    ids = [r[0] for r in conn.execute("SELECT id FROM orders WHERE id >= 100 ORDER BY id")]
    assert ids == [100], ids
    conn.execute("DELETE FROM orders WHERE id >= 100")
    ok("psycopg savepoints")

    # statements psycopg prepares with Parse and deallocates in SQL when its cache is
    # full (one namespace with PREPARE's, as in Postgres)
    prep = psycopg.connect(DSN, autocommit=True, prepare_threshold=0)
    prep.prepared_max = 2
    for i in range(6):
        assert prep.execute(f"SELECT %s::int + {i}", (i,)).fetchone() == (2 * i,)
    try:
        prep.execute("DEALLOCATE _pg3_0", prepare=False)
        raise AssertionError("a statement psycopg evicted was not deallocated")
    except psycopg.errors.InvalidSqlStatementName:
        pass
    prep.execute("PREPARE py_double (int) AS SELECT $1 * 2", prepare=False)
    assert prep.execute("EXECUTE py_double(21)").fetchone() == (42,)
    try:
        prep.execute("EXECUTE py_double(%s)", (4,))
        raise AssertionError("EXECUTE took a bound parameter")
    except psycopg.errors.UndefinedParameter:
        pass
    prep.execute("DEALLOCATE ALL")
    assert prep.execute("SELECT %s::text", ("after",)).fetchone() == ("after",)
    prep.close()
    ok("psycopg prepared statements")

    # a data-modifying WITH with bound parameters (Parse/Describe plan it without running)
    conn.execute("INSERT INTO orders VALUES (200, 'queued', 1, NULL), (201, 'queued', 2, NULL)")
    moved = conn.execute(
        "WITH d AS (DELETE FROM orders WHERE id >= %s RETURNING id, customer) "
        "SELECT id, customer FROM d ORDER BY id",
        (200,),
    ).fetchall()
    assert moved == [(200, "queued"), (201, "queued")], moved
    left = conn.execute("SELECT count(*) FROM orders WHERE id >= 200").fetchone()
    assert left == (0,), left
    ok("psycopg data-modifying WITH")

    # UPDATE ... FROM and DELETE ... USING with bound parameters, RETURNING the other
    # relation's columns (expected values from PostgreSQL 15), prepared and not
    conn.execute("CREATE TABLE py_jt (id int PRIMARY KEY, v int)")
    conn.execute("CREATE TABLE py_js (id int PRIMARY KEY, w int, note text)")
    conn.execute("INSERT INTO py_jt VALUES (1, 10), (2, 20), (3, 30)")
    conn.execute("INSERT INTO py_js VALUES (1, 100, 'one'), (2, 200, 'two'), (3, 300, 'three')")
    for prepare, add in ((False, 5), (True, 6)):
        cur = conn.execute(
            "UPDATE py_jt t SET v = s.w + %s FROM py_js s WHERE t.id = s.id AND s.id = %s "
            "RETURNING t.v, s.note",
            (add, 1),
            prepare=prepare,
        )
        assert [d.name for d in cur.description] == ["v", "note"], cur.description
        assert cur.fetchall() == [(100 + add, "one")]
        assert cur.statusmessage == "UPDATE 1", cur.statusmessage
    cur = conn.execute(
        "DELETE FROM py_jt t USING py_js s WHERE t.id = s.id AND s.w = %s RETURNING s.note, t.v",
        (200,),
        prepare=True,
    )
    assert cur.fetchall() == [("two", 20)] and cur.statusmessage == "DELETE 1"
    cur = conn.execute(
        "DELETE FROM py_jt t USING py_js s WHERE t.id = s.id AND s.w = %s", (300,), prepare=True
    )
    assert cur.statusmessage == "DELETE 1", cur.statusmessage
    assert conn.execute("SELECT id, v FROM py_jt").fetchall() == [(1, 106)]
    conn.execute("DROP TABLE py_jt, py_js")
    ok("psycopg UPDATE ... FROM and DELETE ... USING RETURNING")

    # COPY with psycopg's copy protocol objects
    with conn.cursor().copy("COPY orders (id, customer, amount) FROM STDIN") as cp:
        for i in range(200, 1200):
            cp.write_row((i, f"bulk{i % 7}", i / 4))
    assert conn.execute("SELECT count(*) FROM orders WHERE id >= 200").fetchone()[0] == 1000
    # records split across CopyData messages, a quoted newline among them
    with conn.cursor().copy("COPY orders (id, customer) FROM STDIN (FORMAT csv)") as cp:
        for chunk in ['3000,"multi', '\nline"\n30', '01,pl', 'ain\n3002,"a""b"\r\n']:
            cp.write(chunk)
    got = conn.execute("SELECT id, customer FROM orders WHERE id >= 3000 ORDER BY id").fetchall()
    assert got == [(3000, "multi\nline"), (3001, "plain"), (3002, 'a"b')], got
    conn.execute("DELETE FROM orders WHERE id >= 3000")
    # an exception inside the block sends CopyFail: nothing is written
    try:
        with conn.cursor().copy("COPY orders (id, customer) FROM STDIN") as cp:
            cp.write_row((5000, "never"))
            raise RuntimeError("client gives up")
    except RuntimeError:
        pass
    assert conn.execute("SELECT count(*) FROM orders WHERE id = 5000").fetchone() == (0,)
    # interval text in Postgres' input forms, read once per value by COPY
    conn.execute("CREATE TABLE py_iv (i interval)")
    with conn.cursor().copy("COPY py_iv FROM STDIN") as cp:
        cp.write("-1 day +2 hours\nP1W\n1 2:03:04\n")
    got = [r[0] for r in conn.execute("SELECT i::text FROM py_iv ORDER BY i")]
    assert got == ["-1 days +02:00:00", "1 day 02:03:04", "7 days"], got
    try:
        with conn.cursor().copy("COPY py_iv FROM STDIN") as cp:
            cp.write("1 day\nbogus\n")
        raise AssertionError("COPY read a bad interval")
    except psycopg.errors.DataError as e:
        assert "line 2" in str(e.diag.context), e.diag.context
    conn.execute("DROP TABLE py_iv")
    # a COPY inside a transaction block goes with its ROLLBACK
    tx = psycopg.connect(DSN)
    with tx.cursor().copy("COPY orders (id, customer) FROM STDIN") as cp:
        cp.write_row((6000, "in a block"))
    assert tx.execute("SELECT count(*) FROM orders WHERE id = 6000").fetchone() == (1,)
    tx.rollback()
    assert tx.execute("SELECT count(*) FROM orders WHERE id = 6000").fetchone() == (0,)
    tx.close()
    ok("psycopg copy")

    # SUBSCRIBE streamed while another connection writes; the snapshot plus every change
    # must add up to the view's contents. The writer's last row is a marker: once it is
    # seen, every earlier change has been (epochs arrive in order).
    def writer():
        w = psycopg.connect(DSN, autocommit=True)
        for i in range(30):
            if i % 3 == 2:
                w.execute("DELETE FROM orders WHERE id = %s", (2000 + i - 1,))
            else:
                w.execute("INSERT INTO orders VALUES (%s, %s, %s, NULL)", (2000 + i, f"w{i % 4}", i))
            time.sleep(0.01)
        w.execute("INSERT INTO orders VALUES (2999, 'marker', 0, NULL)")
        w.close()

    reader = psycopg.connect(DSN, autocommit=True)
    state = collections.Counter()
    t = threading.Thread(target=writer)
    last = None
    for row in reader.cursor().stream("SUBSCRIBE TO per_customer"):
        epoch, diff, *cols = row
        assert diff in (1, -1), row
        assert last is None or epoch >= last, (last, epoch)
        last = epoch
        key = tuple(str(c) for c in cols)
        state[key] += diff
        assert state[key] >= 0, (key, state[key])
        if not t.is_alive() and t.ident is None:
            t.start()
        if cols[0] == "marker" and diff == 1:
            break
    reader.close()
    t.join()
    conn.execute("FLUSH")
    expected = collections.Counter(
        tuple(str(c) for c in r) for r in conn.execute("SELECT * FROM per_customer")
    )
    assert +state == expected, (+state, expected)
    ok("psycopg subscribe stream")

    # server-side cursors: DECLARE through the extended protocol (with parameters), the
    # cursor described as a protocol portal, FETCH in batches
    tx = psycopg.connect(DSN)
    with tx.cursor(name="big") as cur:
        cur.itersize = 100
        cur.execute("SELECT id FROM orders WHERE id >= %s AND id < %s", [200, 1200])
        assert sum(1 for _ in cur) == 1000
        assert [d.name for d in cur.description] == ["id"]
    with tx.cursor(name="sub") as cur:
        cur.execute("SUBSCRIBE per_customer")
        first = cur.fetchmany(5)
        assert len(first) == 5 and all(r[1] == 1 for r in first), first
        assert [d.name for d in cur.description][:2] == ["weir_epoch", "weir_diff"]
    tx.rollback()
    tx.close()
    ok("psycopg server-side cursors")

    # a cancel request ends a SUBSCRIBE with 57014; the connection stays usable
    threading.Timer(0.5, conn.cancel).start()
    try:
        for _ in conn.cursor().stream("SUBSCRIBE per_customer"):
            pass
        raise AssertionError("SUBSCRIBE ended without a cancel")
    except psycopg.errors.QueryCanceled:
        pass
    assert conn.execute("SELECT 1").fetchone() == (1,)
    ok("psycopg subscribe cancel")

    # COPY (SUBSCRIBE ...) TO STDOUT streams lines
    threading.Timer(0.5, conn.cancel).start()
    lines = []
    try:
        with conn.cursor().copy("COPY (SUBSCRIBE per_customer) TO STDOUT") as cp:
            for data in cp:
                lines.append(bytes(data))
    except psycopg.errors.QueryCanceled:
        pass
    assert lines and all(l.split(b"\t")[1] == b"1" for l in lines), lines[:3]
    ok("psycopg copy subscribe")

    # a client that vanishes mid-SUBSCRIBE is cleaned up (keepalives find it)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import psycopg\n"
            f"c = psycopg.connect({DSN!r}, autocommit=True)\n"
            "for r in c.cursor().stream('SUBSCRIBE per_customer'):\n"
            "    print(r, flush=True)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip()
    subs = lambda: conn.execute(
        "SELECT subscribers FROM weir_views WHERE view_name = 'per_customer'"
    ).fetchone()[0]
    assert subs() == 1, subs()
    child.kill()
    child.wait()
    deadline = time.time() + 15
    while subs() != 0:
        assert time.time() < deadline, "the subscription outlived its client"
        time.sleep(0.2)
    conn.close()
    ok("psycopg subscribe disconnect")


def check_notifications():
    """LISTEN in one connection, NOTIFY from another while the listener is idle: psycopg 3's
    notifies() generator and psycopg2's poll() receive each committed notification, with
    the sender's pid, and none of a rolled-back block."""
    import select

    import psycopg
    import psycopg2

    listener = psycopg.connect(DSN, autocommit=True)
    listener.execute("LISTEN jobs")
    sender = psycopg.connect(DSN, autocommit=True)
    sender_pid = sender.info.backend_pid
    with sender.transaction():
        sender.execute("NOTIFY jobs, 'first'")
    try:
        with sender.transaction():
            sender.execute("NOTIFY jobs, 'undone'")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    sender.execute("SELECT pg_notify('jobs', 'second')")
    got = []
    for n in listener.notifies(timeout=10):
        got.append((n.channel, n.payload, n.pid))
        if len(got) == 2:
            break
    assert got == [("jobs", "first", sender_pid), ("jobs", "second", sender_pid)], got
    ok("psycopg listen notify")

    c2 = psycopg2.connect(DSN)
    c2.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
    c2.cursor().execute("LISTEN jobs2")
    # the notification arrives while c2 waits on its socket, idle (the sender's statement
    # runs on a timer thread, joined before the sender is closed)
    timer = threading.Timer(0.3, lambda: sender.execute("NOTIFY jobs2, 'wake'"))
    timer.start()
    deadline = time.time() + 10
    while not c2.notifies:
        assert time.time() < deadline, "no notification reached psycopg2"
        if select.select([c2], [], [], 1) != ([], [], []):
            c2.poll()
    timer.join()
    n = c2.notifies.pop(0)
    assert (n.channel, n.payload, n.pid) == ("jobs2", "wake", sender_pid), n
    c2.close()
    listener.close()
    sender.close()
    ok("psycopg2 listen notify")


def check_sqlalchemy():
    import sqlalchemy
    from sqlalchemy import create_engine, inspect

    drivers = ["psycopg2"]
    if sqlalchemy.__version__ >= "2":
        drivers.append("psycopg")
    for driver in drivers:
        engine = create_engine(f"postgresql+{driver}://weir@127.0.0.1:{PORT}/weir")
        i = inspect(engine)
        assert i.get_table_names() == ["orders"], i.get_table_names()
        assert "public" in i.get_schema_names()
        if hasattr(i, "get_materialized_view_names"):
            assert i.get_materialized_view_names() == ["per_customer"]
            assert i.get_view_names() == []
        else:
            # 1.4 lists materialized views with the views
            assert i.get_view_names() == ["per_customer"], i.get_view_names()
        cols = i.get_columns("orders")
        assert [(c["name"], str(c["type"]), c["nullable"]) for c in cols] == [
            ("id", "INTEGER", False),
            ("customer", "VARCHAR(20)", False),
            ("amount", "NUMERIC(10, 2)", True),
            ("placed", "TIMESTAMP", True),
        ], cols
        pk = i.get_pk_constraint("orders")
        assert pk["constrained_columns"] == ["id"] and pk["name"] == "orders_pkey", pk
        assert i.get_foreign_keys("orders") == []
        assert i.get_indexes("orders") == []
        assert i.get_unique_constraints("orders") == []
        assert i.get_table_comment("orders")["text"] is None
        vcols = i.get_columns("per_customer")
        assert [(c["name"], str(c["type"])) for c in vcols] == [
            ("customer", "VARCHAR(20)"),
            ("n", "BIGINT"),
            ("total", "NUMERIC(20, 2)"),
        ], vcols
        assert "GROUP BY customer" in i.get_view_definition("per_customer")
        assert i.has_table("orders") and not i.has_table("nope")
        with engine.connect() as c:
            n = c.execute(sqlalchemy.text("SELECT count(*) FROM orders WHERE id < :k"), {"k": 3})
            assert n.scalar() == 2
        engine.dispose()
        ok(f"sqlalchemy {sqlalchemy.__version__.split('.')[0]}.x inspector over {driver}")


def check_sqlalchemy_orm():
    # what an ORM's create_all emits: UNIQUE, CHECK, a uuid key with a Python default
    import uuid

    import sqlalchemy
    from sqlalchemy import CheckConstraint, Column, ForeignKey, Index, Integer, MetaData, String, Table, create_engine

    engine = create_engine(f"postgresql+psycopg://weir@127.0.0.1:{PORT}/weir")
    md = MetaData()
    users = Table(
        "orm_users",
        md,
        Column("id", Integer, primary_key=True),
        Column("email", String(50), unique=True, nullable=False),
        Column("age", Integer, CheckConstraint("age >= 0", name="age_not_negative")),
        Column("token", sqlalchemy.Uuid, default=uuid.uuid4, nullable=False),
        Column("status", String(10), server_default="new"),
        Column("joined", sqlalchemy.DateTime(timezone=True), server_default=sqlalchemy.func.now()),
    )
    orders = Table(
        "orm_orders",
        md,
        Column("id", Integer, primary_key=True, comment="the order number"),
        Column("user_id", Integer, ForeignKey("orm_users.id", ondelete="CASCADE"), nullable=False),
        Index("orm_orders_user_idx", "user_id", "id"),
        comment="one row per order",
    )
    md.create_all(engine)
    with engine.begin() as c:
        c.execute(users.insert(), [{"id": 1, "email": "a@x", "age": 3}, {"id": 2, "email": "b@x", "age": 4}])
    for bad in [{"id": 3, "email": "a@x", "age": 1}, {"id": 4, "email": "c@x", "age": -1}]:
        try:
            with engine.begin() as c:
                c.execute(users.insert(), bad)
            raise AssertionError(f"accepted {bad}")
        except sqlalchemy.exc.IntegrityError:
            pass
    with engine.connect() as c:
        rows = c.execute(sqlalchemy.select(users.c.id, users.c.token).order_by(users.c.id)).all()
    assert [r[0] for r in rows] == [1, 2], rows
    assert all(isinstance(r[1], uuid.UUID) for r in rows), rows
    i = sqlalchemy.inspect(engine)
    uniques = i.get_unique_constraints("orm_users")
    assert [(u["name"], u["column_names"]) for u in uniques] == [("orm_users_email_key", ["email"])], uniques
    # server defaults: applied, and read back as Postgres shows them
    with engine.connect() as c:
        status = c.execute(sqlalchemy.select(users.c.status).where(users.c.id == 1)).scalar_one()
    assert status == "new", status
    defaults = {c["name"]: c["default"] for c in i.get_columns("orm_users")}
    assert defaults == {
        "id": "nextval('orm_users_id_seq'::regclass)",
        "email": None,
        "age": None,
        "token": None,
        "status": "'new'::character varying",
        "joined": "now()",
    }, defaults
    checks = i.get_check_constraints("orm_users")
    assert [(c["name"], c["sqltext"]) for c in checks] == [("age_not_negative", "age >= 0")], checks
    # a foreign key: checked, cascaded, read back by the inspector
    with engine.begin() as c:
        c.execute(orders.insert(), [{"id": 10, "user_id": 1}, {"id": 11, "user_id": 2}])
    try:
        with engine.begin() as c:
            c.execute(orders.insert(), {"id": 12, "user_id": 99})
        raise AssertionError("accepted an order of no user")
    except sqlalchemy.exc.IntegrityError as e:
        assert "orm_orders_user_id_fkey" in str(e), e
    with engine.begin() as c:
        c.execute(users.delete().where(users.c.id == 1))
    with engine.connect() as c:
        left = c.execute(sqlalchemy.select(orders.c.id).order_by(orders.c.id)).scalars().all()
    assert left == [11], left
    fks = i.get_foreign_keys("orm_orders")
    assert [
        (f["name"], f["constrained_columns"], f["referred_table"], f["referred_columns"], f["options"])
        for f in fks
    ] == [("orm_orders_user_id_fkey", ["user_id"], "orm_users", ["id"], {"ondelete": "CASCADE"})], fks
    # indexes read back (pg_index.indkey is an int2vector, as the inspector expects)
    indexes = i.get_indexes("orm_orders")
    assert [(x["name"], x["unique"], x["column_names"]) for x in indexes] == [
        ("orm_orders_user_idx", False, ["user_id", "id"])
    ], indexes
    indexes = i.get_indexes("orm_users")
    assert [(x["name"], x["unique"], x["column_names"], x.get("duplicates_constraint")) for x in indexes] == [
        ("orm_users_email_key", True, ["email"], "orm_users_email_key")
    ], indexes
    # comments (COMMENT ON, emitted by create_all) read back
    assert i.get_table_comment("orm_orders") == {"text": "one row per order"}, i.get_table_comment("orm_orders")
    cols = {c["name"]: c.get("comment") for c in i.get_columns("orm_orders")}
    assert cols == {"id": "the order number", "user_id": None}, cols
    order = [t for t, _ in i.get_sorted_table_and_fkc_names()]
    assert order.index("orm_users") < order.index("orm_orders"), order
    md.drop_all(engine)
    # an Identity column: its DDL (options in SQLAlchemy's order), values, and its options
    # read back by the inspector (what Alembic compares)
    md2 = MetaData()
    counted = Table(
        "orm_counted",
        md2,
        Column("id", Integer, sqlalchemy.Identity(start=5, increment=2), primary_key=True),
        Column("v", Integer),
    )
    md2.create_all(engine)
    with engine.begin() as c:
        c.execute(counted.insert(), [{"v": 1}, {"v": 2}])
        ids = c.execute(sqlalchemy.select(counted.c.id).order_by(counted.c.id)).scalars().all()
    assert ids == [5, 7], ids
    identity = {c["name"]: c.get("identity") for c in sqlalchemy.inspect(engine).get_columns("orm_counted")}
    assert identity["v"] is None, identity
    got = identity["id"]
    assert (got["always"], got["start"], got["increment"], got["minvalue"], got["cycle"]) == (
        False,
        5,
        2,
        1,
        False,
    ), got
    md2.drop_all(engine)
    engine.dispose()
    ok("sqlalchemy orm create_all with unique, check, foreign key, comments and uuid")


def check_sqlalchemy_enum():
    # an Enum column as SQLAlchemy declares it: CREATE TYPE ... AS ENUM, values in label
    # order, the inspector's get_enums (pg_enum) and column type, a bad label refused;
    # over both drivers
    import enum

    import sqlalchemy
    from sqlalchemy import Column, Integer, MetaData, Table, create_engine, select

    class Mood(enum.Enum):
        sad = 1
        ok = 2
        happy = 3

    for driver in ["psycopg", "psycopg2"]:
        engine = create_engine(f"postgresql+{driver}://weir@127.0.0.1:{PORT}/weir")
        md = MetaData()
        t = Table(
            "sa_people",
            md,
            Column("id", Integer, primary_key=True),
            Column("mood", sqlalchemy.Enum(Mood, name="sa_mood"), nullable=False),
        )
        md.create_all(engine)
        with engine.begin() as c:
            c.execute(t.insert(), [{"id": 1, "mood": Mood.happy}, {"id": 2, "mood": Mood.sad}, {"id": 3, "mood": Mood.ok}])
        with engine.connect() as c:
            rows = c.execute(select(t.c.id, t.c.mood).order_by(t.c.mood)).all()
            assert [r[1] for r in rows] == [Mood.sad, Mood.ok, Mood.happy], rows
            rows = c.execute(select(t.c.id).where(t.c.mood == Mood.happy)).all()
            assert rows == [(1,)], rows
            rows = c.execute(select(t.c.id).where(t.c.mood > Mood.sad).order_by(t.c.id)).all()
            assert rows == [(1,), (3,)], rows
        i = sqlalchemy.inspect(engine)
        enums = i.get_enums()
        assert enums == [{"name": "sa_mood", "schema": "public", "visible": True, "labels": ["sad", "ok", "happy"]}], enums
        mood = {c["name"]: c["type"] for c in i.get_columns("sa_people")}["mood"]
        assert isinstance(mood, sqlalchemy.Enum) and list(mood.enums) == ["sad", "ok", "happy"], mood
        try:
            with engine.begin() as c:
                c.execute(sqlalchemy.text("insert into sa_people values (4, 'nope')"))
            raise AssertionError("accepted a label the enum does not have")
        except sqlalchemy.exc.DataError as e:
            assert "invalid input value for enum sa_mood" in str(e), e
        md.drop_all(engine)
        assert sqlalchemy.inspect(engine).get_enums() == []
        engine.dispose()
    ok("sqlalchemy Enum: CREATE TYPE, label order, get_enums, bad label refused (psycopg 3 and 2)")


def check_sqlalchemy_domain():
    # a DOMAIN as SQLAlchemy reflects it: get_domains (pg_type, pg_constraint) and the
    # column's DOMAIN type over its base; a value outside it refused as IntegrityError
    import sqlalchemy
    from sqlalchemy import MetaData, Table, create_engine

    for driver in ["psycopg", "psycopg2"]:
        engine = create_engine(f"postgresql+{driver}://weir@127.0.0.1:{PORT}/weir")
        with engine.begin() as c:
            c.exec_driver_sql(
                "CREATE DOMAIN sa_pos AS int NOT NULL DEFAULT 1 CONSTRAINT sa_pos_check CHECK (VALUE > 0)"
            )
            c.exec_driver_sql("CREATE TABLE sa_dom (id int PRIMARY KEY, p sa_pos)")
            c.exec_driver_sql("INSERT INTO sa_dom (id) VALUES (1)")
        i = sqlalchemy.inspect(engine)
        domains = i.get_domains()
        assert domains == [
            {
                "name": "sa_pos",
                "schema": "public",
                "visible": True,
                "type": "integer",
                "nullable": False,
                "default": "1",
                "constraints": [{"name": "sa_pos_check", "check": "VALUE > 0"}],
                "collation": None,
                "collation_schema": None,
            }
        ], domains
        t = Table("sa_dom", MetaData(), autoload_with=engine)
        assert repr(t.c.p.type) == "DOMAIN('sa_pos', INTEGER())", repr(t.c.p.type)
        with engine.connect() as c:
            assert c.execute(sqlalchemy.select(t.c.p)).all() == [(1,)]
        try:
            with engine.begin() as c:
                c.execute(t.insert(), [{"id": 2, "p": -5}])
            raise AssertionError("accepted a value outside the domain")
        except sqlalchemy.exc.IntegrityError as e:
            assert 'value for domain sa_pos violates check constraint "sa_pos_check"' in str(e), e
        with engine.begin() as c:
            c.exec_driver_sql("DROP TABLE sa_dom")
            c.exec_driver_sql("DROP DOMAIN sa_pos")
        engine.dispose()
    ok("sqlalchemy DOMAIN: get_domains, the reflected column type, a value outside it refused (psycopg 3 and 2)")


def check_reset_reports_settings():
    # RESET, RESET ALL and DISCARD ALL report the settings clients track (ParameterStatus)
    # they change back, as SET reports them; a startup option is what RESET returns to
    import psycopg

    with psycopg.connect(
        f"host=127.0.0.1 port={PORT} user=weir dbname=weir options='-c TimeZone=America/New_York'",
        autocommit=True,
    ) as c:
        status = lambda: (c.info.parameter_status("TimeZone"), c.info.parameter_status("application_name"))
        start = status()
        assert start[0] == "America/New_York", start
        c.execute("SET TimeZone = 'Asia/Tokyo'")
        c.execute("SET application_name = 'resets'")
        assert status() == ("Asia/Tokyo", "resets"), status()
        assert c.execute("RESET TimeZone").statusmessage == "RESET"
        assert status() == (start[0], "resets"), status()
        c.execute("RESET ALL")
        assert status() == start, status()
        c.execute("SET TimeZone = 'UTC'")
        assert c.execute("DISCARD ALL").statusmessage == "DISCARD ALL"
        assert status() == start, status()
        assert c.execute("RESET ROLE").statusmessage == "RESET"
        assert c.execute("SET ROLE NONE").statusmessage == "SET"
        # a ROLLBACK, the end of a SET LOCAL and ROLLBACK TO SAVEPOINT put values back:
        # reported too
        c.execute("BEGIN")
        c.execute("SET TimeZone = 'Asia/Tokyo'")
        assert status()[0] == "Asia/Tokyo", status()
        c.execute("ROLLBACK")
        assert status() == start, status()
        c.execute("BEGIN")
        c.execute("SET LOCAL TimeZone = 'Asia/Tokyo'")
        assert status()[0] == "Asia/Tokyo", status()
        c.execute("COMMIT")
        assert status() == start, status()
        c.execute("BEGIN")
        c.execute("SAVEPOINT s")
        c.execute("SET application_name = 'inner'")
        c.execute("ROLLBACK TO SAVEPOINT s")
        assert status() == start, status()
        c.execute("COMMIT")
        # set_config in a query: reported before the query's ReadyForQuery (simple and
        # extended protocol), not a statement late
        c.execute("SELECT set_config('TimeZone', 'Asia/Tokyo', false)")
        assert status()[0] == "Asia/Tokyo", status()
        c.execute("SELECT set_config('application_name', %s, false)", ["late"])
        assert status()[1] == "late", status()
        # the simple query protocol (PQexec): reported before its ReadyForQuery too
        c.pgconn.exec_(b"SELECT set_config('TimeZone', 'Europe/Paris', false)")
        assert status()[0] == "Europe/Paris", status()
        c.execute("RESET ALL")
        assert status() == start, status()
    ok("psycopg RESET reports the settings it changes back")


def check_psycopg_enum():
    # psycopg 3's enum adapter: EnumInfo.fetch reads pg_type/pg_enum; values go both ways
    # in text and in binary (an enum's binary form is its label's text)
    import enum

    import psycopg
    from psycopg.types.enum import EnumInfo, register_enum

    with psycopg.connect(f"host=127.0.0.1 port={PORT} user=weir dbname=weir", autocommit=True) as c:
        c.execute("CREATE TYPE pg3_mood AS ENUM ('sad', 'ok', 'happy')")
        c.execute("CREATE TABLE pg3_people (id int PRIMARY KEY, m pg3_mood)")
        info = EnumInfo.fetch(c, "pg3_mood")
        assert info is not None and info.labels == ["sad", "ok", "happy"], info

        class Mood(enum.Enum):
            sad = "sad"
            ok = "ok"
            happy = "happy"

        register_enum(info, c, Mood)
        for binary in [False, True]:
            cur = c.cursor(binary=binary)
            cur.execute("DELETE FROM pg3_people")
            cur.execute("INSERT INTO pg3_people VALUES (%s, %s), (%s, %s)", (1, Mood.happy, 2, Mood.sad))
            cur.execute("SELECT id, m FROM pg3_people ORDER BY m")
            assert cur.fetchall() == [(2, Mood.sad), (1, Mood.happy)], binary
            cur.execute("SELECT id FROM pg3_people WHERE m > %s", (Mood.sad,))
            assert cur.fetchall() == [(1,)], binary
        c.execute("DROP TABLE pg3_people")
        c.execute("DROP TYPE pg3_mood")
    ok("psycopg 3 enum adapter, text and binary")


def check_psycopg_inet():
    # inet / cidr: psycopg 3 hands out ipaddress objects (text and binary results) and sends
    # them as parameters (binary too); psycopg2 reads the text
    import ipaddress
    import psycopg
    import psycopg2

    with psycopg.connect(f"host=127.0.0.1 port={PORT} user=weir dbname=weir", autocommit=True) as c:
        c.execute("CREATE TABLE py_inet (id int PRIMARY KEY, ip inet, net cidr)")
        c.execute("INSERT INTO py_inet VALUES (1, %s, %s)",
                  [ipaddress.ip_interface("10.1.2.3/24"), ipaddress.ip_network("10.0.0.0/8")])
        c.cursor(binary=True).execute("INSERT INTO py_inet VALUES (2, %b, %b)",
                                      [ipaddress.ip_address("::1"), ipaddress.ip_network("2001:db8::/32")])
        for binary in [False, True]:
            cur = c.cursor(binary=binary)
            cur.execute("SELECT ip, net, ip << %s FROM py_inet ORDER BY ip",
                        [ipaddress.ip_network("10.0.0.0/8")])
            rows = cur.fetchall()
            assert rows == [
                (ipaddress.ip_interface("10.1.2.3/24"), ipaddress.ip_network("10.0.0.0/8"), True),
                (ipaddress.ip_address("::1"), ipaddress.ip_network("2001:db8::/32"), False),
            ], (binary, rows)
        c.execute("DROP TABLE py_inet")
    c2 = psycopg2.connect(host="127.0.0.1", port=PORT, user="weir", dbname="weir")
    cur = c2.cursor()
    cur.execute("SELECT '10.1.2.3/24'::inet, network('10.1.2.3/24'::inet)")
    assert cur.fetchone() == ("10.1.2.3/24", "10.1.2.0/24"), "psycopg2 inet"
    c2.close()
    ok("psycopg 3 ipaddress values for inet and cidr, text and binary")


def check_psycopg_json():
    # json_build_object / json_agg are typed json (OID 114): psycopg 2 and 3 decode them into
    # Python values, in text and (psycopg 3) binary
    import psycopg
    import psycopg2

    with psycopg.connect(f"host=127.0.0.1 port={PORT} user=weir dbname=weir", autocommit=True) as c:
        for binary in [False, True]:
            cur = c.cursor(binary=binary)
            cur.execute(
                "SELECT json_build_object('a', 1, 'b', json_build_array('x', NULL)), "
                "json_agg(g ORDER BY g), jsonb_build_object('k', 2.5) FROM generate_series(1, 3) g"
            )
            row = cur.fetchone()
            assert row == ({"a": 1, "b": ["x", None]}, [1, 2, 3], {"k": 2.5}), (binary, row)
    c2 = psycopg2.connect(host="127.0.0.1", port=PORT, user="weir", dbname="weir")
    cur = c2.cursor()
    cur.execute("SELECT json_agg(json_build_object('id', g) ORDER BY g) FROM generate_series(1, 2) g")
    assert cur.fetchone()[0] == [{"id": 1}, {"id": 2}], "psycopg2 json"
    c2.close()
    ok("psycopg 2 and 3 decode json function results")


def check_psycopg_typed_arrays():
    # array_agg and ARRAY[] of uuid / jsonb are uuid[] / jsonb[] (as in Postgres): psycopg 3 hands out
    # UUIDs and decoded JSON, in text and binary, not strings
    import uuid
    import psycopg

    u1, u2 = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12"
    with psycopg.connect(f"host=127.0.0.1 port={PORT} user=weir dbname=weir", autocommit=True) as c:
        c.execute("CREATE TABLE py_arr (id uuid, doc jsonb, k int)")
        c.execute("INSERT INTO py_arr VALUES (%s, '{\"a\": 1}', 1), (%s, '[2]', 1)", (u1, u2))
        for binary in [False, True]:
            cur = c.cursor(binary=binary)
            cur.execute("SELECT array_agg(id ORDER BY id), array_agg(doc ORDER BY id) FROM py_arr GROUP BY k")
            row = cur.fetchone()
            assert row == ([uuid.UUID(u1), uuid.UUID(u2)], [{"a": 1}, [2]]), (binary, row)
            cur.execute("SELECT ARRAY[id], ARRAY[doc] FROM py_arr WHERE id = %s", (u1,))
            row = cur.fetchone()
            assert row == ([uuid.UUID(u1)], [{"a": 1}]), (binary, row)
        c.execute("DROP TABLE py_arr")
    ok("psycopg 3 reads array_agg and ARRAY[] of uuid and jsonb as uuid[] and jsonb[]")


if WHAT == "all":
    setup()
    check_psycopg2()
    check_psycopg3()
    check_notifications()
    check_sqlalchemy()
    check_sqlalchemy_orm()
    check_sqlalchemy_enum()
    check_sqlalchemy_domain()
    check_reset_reports_settings()
    check_psycopg_enum()
    check_psycopg_typed_arrays()
    check_psycopg_inet()
    check_psycopg_json()
else:
    check_sqlalchemy()
