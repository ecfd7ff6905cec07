import java.sql.*;
import java.util.*;
import org.postgresql.copy.CopyManager;
import org.postgresql.core.BaseConnection;

/** Weir through pgJDBC: DatabaseMetaData, ResultSetMetaData, prepared statements, COPY,
 *  savepoints. Prints one line per check; the Rust test compares the lines. */
public class JdbcCheck {
    static void row(String label, Object... v) {
        StringBuilder b = new StringBuilder(label);
        for (Object o : v) b.append('|').append(o);
        System.out.println(b);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/weir?user=weir";
        try (Connection c = DriverManager.getConnection(url)) {
            DatabaseMetaData md = c.getMetaData();
            row("product", md.getDatabaseProductName());
            try (ResultSet rs = md.getSchemas()) {
                while (rs.next()) row("schema", rs.getString("TABLE_SCHEM"));
            }
            try (ResultSet rs = md.getTables(null, "public", "%", null)) {
                while (rs.next()) row("table", rs.getString("TABLE_NAME"), rs.getString("TABLE_TYPE"));
            }
            try (ResultSet rs = md.getColumns(null, "public", "jt", "%")) {
                while (rs.next())
                    row("column", rs.getString("COLUMN_NAME"), rs.getString("TYPE_NAME"),
                        rs.getInt("DATA_TYPE"), rs.getString("IS_NULLABLE"), rs.getInt("ORDINAL_POSITION"));
            }
            try (ResultSet rs = md.getPrimaryKeys(null, "public", "jt")) {
                while (rs.next()) row("pk", rs.getString("COLUMN_NAME"), rs.getInt("KEY_SEQ"), rs.getString("PK_NAME"));
            }
            try (ResultSet rs = md.getIndexInfo(null, "public", "jt", false, false)) {
                while (rs.next()) row("index", rs.getString("INDEX_NAME"), rs.getBoolean("NON_UNIQUE"), rs.getString("COLUMN_NAME"));
            }
            int types = 0;
            try (ResultSet rs = md.getTypeInfo()) {
                while (rs.next()) types++;
            }
            row("typeinfo", types > 10);
            try (PreparedStatement ps = c.prepareStatement("SELECT id, name, amount, at FROM jt WHERE id >= ? ORDER BY id")) {
                ps.setInt(1, 2);
                try (ResultSet rs = ps.executeQuery()) {
                    ResultSetMetaData m = rs.getMetaData();
                    for (int i = 1; i <= m.getColumnCount(); i++)
                        row("rsmd", m.getColumnName(i), m.getColumnTypeName(i), m.getTableName(i));
                    while (rs.next()) row("data", rs.getInt(1), rs.getString(2), rs.getBigDecimal(3), rs.getTimestamp(4));
                }
            }
            // a renamed table column keeps its table (and nullability); a computed numeric
            // has no declared precision and scale, a cast to numeric(p, s) has them
            try (Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT name AS \"Name\", amount * 2 AS a2, amount::numeric(12, 3) AS a3, x.id FROM jt, (SELECT id FROM jt) x WHERE x.id = jt.id AND false")) {
                ResultSetMetaData m = rs.getMetaData();
                for (int i = 1; i <= m.getColumnCount(); i++)
                    row("rsmd2", m.getColumnLabel(i), m.getTableName(i), m.isNullable(i), m.getPrecision(i), m.getScale(i));
            }
            CopyManager cm = new CopyManager((BaseConnection) c);
            long n = cm.copyIn("COPY jt FROM STDIN (FORMAT csv)",
                new java.io.StringReader("10,copied,1.25,2024-01-02 03:04:05\n11,\"with,comma\",,\n"));
            row("copyin", n);
            java.io.StringWriter w = new java.io.StringWriter();
            cm.copyOut("COPY (SELECT id, name FROM jt WHERE id >= 10 ORDER BY id) TO STDOUT (FORMAT csv)", w);
            row("copyout", w.toString().replace("\n", "/"));
            // uuid: setObject sends it in binary (16 bytes); getObject reads a java.util.UUID
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE ju (id uuid PRIMARY KEY, n int)");
            }
            UUID u = UUID.fromString("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO ju VALUES (?, ?)")) {
                ps.setObject(1, u);
                ps.setInt(2, 1);
                ps.executeUpdate();
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT id, n FROM ju WHERE id = ?")) {
                ps.setObject(1, u);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next())
                        row("uuid", rs.getObject(1).getClass().getSimpleName(), rs.getObject(1),
                            rs.getMetaData().getColumnTypeName(1), rs.getInt(2));
                }
            }
            // a foreign key: refused rows are 23503; DatabaseMetaData reads it back
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE jfk (k int PRIMARY KEY, jt_id int REFERENCES jt ON DELETE CASCADE)");
                s.execute("INSERT INTO jfk VALUES (1, 2)");
                try {
                    s.execute("INSERT INTO jfk VALUES (2, 99)");
                } catch (SQLException e) {
                    row("fkerror", e.getSQLState());
                }
            }
            try (ResultSet rs = md.getImportedKeys(null, "public", "jfk")) {
                while (rs.next())
                    row("importedkey", rs.getString("PKTABLE_NAME"), rs.getString("PKCOLUMN_NAME"),
                        rs.getString("FKTABLE_NAME"), rs.getString("FKCOLUMN_NAME"), rs.getInt("KEY_SEQ"),
                        rs.getInt("UPDATE_RULE"), rs.getInt("DELETE_RULE"), rs.getString("FK_NAME"),
                        rs.getString("PK_NAME"));
            }
            try (ResultSet rs = md.getExportedKeys(null, "public", "jt")) {
                while (rs.next()) row("exportedkey", rs.getString("FKTABLE_NAME"), rs.getString("FK_NAME"));
            }
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.execute("INSERT INTO jt VALUES (20, 'kept', 1, NULL)");
                Savepoint sp = c.setSavepoint("sp");
                s.execute("INSERT INTO jt VALUES (21, 'undone', 1, NULL)");
                try {
                    s.execute("INSERT INTO jt VALUES (20, 'duplicate', 1, NULL)");
                } catch (SQLException e) {
                    row("error", e.getSQLState());
                }
                c.rollback(sp);
                c.commit();
            }
            c.setAutoCommit(true);
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT id FROM jt WHERE id >= 20 ORDER BY id")) {
                while (rs.next()) row("after", rs.getInt(1));
            }
            try (Statement s = c.createStatement()) {
                c.setAutoCommit(false);
                s.setFetchSize(1);
                try (ResultSet rs = s.executeQuery("SELECT id FROM jt ORDER BY id")) {
                    int k = 0;
                    while (rs.next()) k++;
                    row("fetched", k);
                }
                c.commit();
                // SUBSCRIBE with a fetch size: the first batch arrives without the stream ending
                s.execute("FLUSH");
                try (ResultSet rs = s.executeQuery("SUBSCRIBE jv")) {
                    rs.next();
                    row("subscribe", rs.getMetaData().getColumnName(2), rs.getLong(2), rs.getLong(3));
                }
                c.rollback();
            }
        }
    }
}
