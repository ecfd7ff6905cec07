import java.sql.*;
import java.util.Properties;

/** Weir through pgJDBC with SCRAM-SHA-256 over TLS (verify-full against the test's CA).
 *  Usage: java JdbcSecurity PORT CA_PEM. Prints one line per check. */
public class JdbcSecurity {
    static Connection connect(String port, String ca, String user, String password) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user);
        p.setProperty("password", password);
        p.setProperty("ssl", "true");
        p.setProperty("sslmode", "verify-full");
        p.setProperty("sslrootcert", ca);
        return DriverManager.getConnection("jdbc:postgresql://localhost:" + port + "/weir", p);
    }

    public static void main(String[] args) throws Exception {
        try (Connection c = connect(args[0], args[1], "alice", "alice-Pw-2");
             Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT current_user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")) {
            rs.next();
            System.out.println("jdbc|" + rs.getString(1) + "|" + rs.getBoolean(2));
        }
        for (String[] who : new String[][] {{"wrong", "alice"}, {"unknown", "nobody"}}) {
            try (Connection c = connect(args[0], args[1], who[1], "not-the-password")) {
                System.out.println(who[0] + "|connected");
            } catch (SQLException e) {
                System.out.println(who[0] + "|" + e.getSQLState());
            }
        }
    }
}
