package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// MySQLOptions configure StartMySQL and NewMySQL. The zero value (or nil)
// is a fast, non-durable server.
type MySQLOptions struct {
	// Durable sets innodb_flush_log_at_trx_commit=1 (flush and sync the
	// redo log at every commit). By default it is 2: written at commit,
	// synced once a second.
	Durable bool
	// Args are extra server flags, e.g. "--max-connections=1000".
	Args []string
}

// mysqlInstall is the server binary and how to initialise a data directory.
type mysqlInstall struct {
	server    string
	installDB string // mariadb-install-db; "" for MySQL (mysqld --initialize-insecure)
	mariadb   bool
}

// findMySQL prefers MariaDB (mariadbd + mariadb-install-db, what Debian
// ships) and falls back to MySQL's mysqld (initialised with
// --initialize-insecure). $DLOCK_MYSQLD names the server binary.
func findMySQL() (*mysqlInstall, error) {
	server := os.Getenv("DLOCK_MYSQLD")
	if server == "" {
		var err error
		if server, err = lookPath("mariadbd"); err != nil {
			if server, err = lookPath("mysqld"); err != nil {
				return nil, &missingError{what: "mariadbd/mysqld (MariaDB or MySQL server)"}
			}
		}
	}
	out, _ := exec.Command(server, "--version").CombinedOutput()
	inst := &mysqlInstall{server: server, mariadb: strings.Contains(strings.ToLower(string(out)), "mariadb")}
	if inst.mariadb {
		p, err := lookPath("mariadb-install-db")
		if err != nil {
			if p, err = lookPath("mysql_install_db"); err != nil {
				return nil, &missingError{what: "mariadb-install-db"}
			}
		}
		inst.installDB = p
	}
	return inst, nil
}

// StartMySQL initialises a data directory and starts MariaDB (or MySQL 8)
// on a free loopback port, with the user dlock (password dlockpw; all
// privileges on the database dlock, plus PROCESS and CONNECTION ADMIN or
// SUPER so that it can KILL connections). Close it when done.
func StartMySQL(ctx context.Context, opts *MySQLOptions) (*Server, error) {
	if dockerMode() {
		return startDockerMySQL(ctx, opts)
	}
	if opts == nil {
		opts = &MySQLOptions{}
	}
	inst, err := findMySQL()
	if err != nil {
		return nil, err
	}
	return startLocal(KindMySQL, syscall.SIGTERM, func(s *Server) error { return startMySQL(ctx, s, inst, opts) })
}

// startMySQL initialises s's data directory and starts the server. The
// first start is ready when root answers over the socket; then it creates
// the dlock user, and from then on readiness is a TCP round trip as dlock.
func startMySQL(ctx context.Context, s *Server, inst *mysqlInstall, opts *MySQLOptions) error {
	flush := "2"
	if opts.Durable {
		flush = "1"
	}
	s.Settings = map[string]string{"innodb_flush_log_at_trx_commit": flush, "log_bin": "OFF", "innodb_doublewrite": "OFF"}
	layout, err := mysqlLayout(s.Dir)
	if err != nil {
		return err
	}
	if err := initMySQL(ctx, s.Dir, inst, layout); err != nil {
		return err
	}
	sock := filepath.Join(s.Dir, "mysqld.sock")
	var port int
	s.command = func() *exec.Cmd {
		args := append([]string{"--no-defaults"}, layout...)
		args = append(args,
			"--port="+strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--socket="+sock,
			"--pid-file="+filepath.Join(s.Dir, "mysqld.pid"),
			"--skip-log-bin",
			"--innodb-flush-log-at-trx-commit="+flush,
			"--max-connections=500",
			"--performance-schema=OFF",
			"--loose-mysqlx=OFF",
		)
		args = append(args, opts.Args...)
		return newCmd(nil, s.Dir, inst.server, args...)
	}
	rootDSN := "root@unix(" + sock + ")/?timeout=2s"
	s.ready = func(ctx context.Context) error { return mysqlPing(ctx, rootDSN, s) }
	err = s.startOnFreePort(ctx, func() error {
		ps, err := freePorts(1)
		if err != nil {
			return err
		}
		port = ps[0]
		s.Addr = loopback(port)
		setMySQLAddr(s)
		return nil
	})
	if err != nil {
		return err
	}
	if err := mysqlSetup(ctx, rootDSN, inst.mariadb); err != nil {
		return err
	}
	s.ready = func(ctx context.Context) error { return mysqlPing(ctx, s.DSN, s) }
	return s.waitReady(ctx, nil)
}

// mysqlLayout creates the temporary directory of a server in dir and
// returns the flags that initialisation and every start share: where the
// data goes, small InnoDB files (initialisation and start-up write less),
// the character set.
func mysqlLayout(dir string) ([]string, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	layout := []string{
		"--datadir=" + filepath.Join(dir, "data"),
		"--tmpdir=" + tmp,
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		"--innodb-doublewrite=0",
		"--skip-name-resolve",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
		"--loose-innodb-use-native-aio=0",
	}
	if os.Geteuid() == 0 {
		layout = append(layout, "--user=root")
	}
	return layout, nil
}

// initMySQL initialises the data directory: mariadb-install-db, or
// mysqld --initialize-insecure.
func initMySQL(ctx context.Context, dir string, inst *mysqlInstall, layout []string) error {
	if inst.mariadb {
		args := append([]string{"--no-defaults", "--auth-root-authentication-method=normal", "--skip-test-db"}, layout...)
		return runCmd(ctx, newCmd(nil, dir, inst.installDB, args...))
	}
	args := append([]string{"--no-defaults", "--initialize-insecure"}, layout...)
	return runCmd(ctx, newCmd(nil, dir, inst.server, args...))
}

// setMySQLAddr sets URL and DSN from Addr.
func setMySQLAddr(s *Server) {
	s.URL = fmt.Sprintf("mysql://%s:%s@%s/%s", User, Password, s.Addr, Database)
	s.DSN = fmt.Sprintf("%s:%s@tcp(%s)/%s", User, Password, s.Addr, Database)
}

func mysqlPing(ctx context.Context, dsn string, s *Server) error {
	db, err := openMySQL(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return mysqlConn(db).ping(ctx, s, "SELECT VERSION()")
}

func mysqlConn(db *sql.DB) sqlConn {
	return sqlConn{
		kind:  "mysql",
		query: func(ctx context.Context, q string, dest any) error { return db.QueryRowContext(ctx, q).Scan(dest) },
		exec: func(ctx context.Context, q string) error {
			_, err := db.ExecContext(ctx, q)
			return err
		},
	}
}

func openMySQL(dsn string) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("testenv: mysql: bad DSN")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("testenv: mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	return db, nil
}

func mysqlSetup(ctx context.Context, rootDSN string, mariadb bool) error {
	db, err := openMySQL(rootDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	err = mysqlConn(db).run(ctx,
		"CREATE USER '"+User+"'@'%' IDENTIFIED BY '"+Password+"'",
		"CREATE DATABASE "+Database,
		"GRANT ALL PRIVILEGES ON "+Database+".* TO '"+User+"'@'%'")
	if err != nil {
		return err
	}
	// KILL of another user's connection needs CONNECTION ADMIN (MariaDB
	// 10.5+), CONNECTION_ADMIN (MySQL 8) or, before those, SUPER.
	grants := []string{"PROCESS, CONNECTION ADMIN", "PROCESS, CONNECTION_ADMIN", "PROCESS, SUPER"}
	if !mariadb {
		grants = grants[1:]
	}
	var gerr error
	for _, g := range grants {
		if _, gerr = db.ExecContext(ctx, "GRANT "+g+" ON *.* TO '"+User+"'@'%'"); gerr == nil {
			break
		}
	}
	if gerr != nil {
		return fmt.Errorf("testenv: mysql: set-up: %w", gerr)
	}
	return nil
}
