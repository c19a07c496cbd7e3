package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// PGOptions configure StartPostgres and NewPostgres. The zero value (or
// nil) is a fast, non-durable server.
type PGOptions struct {
	// Durable keeps fsync, synchronous_commit and full_page_writes on (the
	// PostgreSQL defaults). By default they are off: a test server need not
	// survive a power cut, and fsync dominates small transactions.
	Durable bool
	// Config are extra settings, "name=value", passed as -c name=value.
	Config []string
}

// postgresBinDir finds the directory of initdb and postgres:
// $DLOCK_PG_BINDIR, the newest /usr/lib/postgresql/*/bin (Debian),
// `pg_config --bindir`, or the directory of initdb on PATH.
func postgresBinDir() (string, error) {
	if d := os.Getenv("DLOCK_PG_BINDIR"); d != "" {
		return d, nil
	}
	ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(ds, func(i, j int) bool { // numeric: 9.6 < 15 < 16
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(ds[i])), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(ds[j])), 64)
		return vi > vj
	})
	for _, d := range ds {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := lookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", &missingError{what: "initdb/postgres (PostgreSQL server)"}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// pgUser is the unprivileged user initdb and postgres run as when this
// process is root (both refuse to run as root); nil otherwise.
type pgUser struct{ uid, gid int }

// credential is the process credential of u (nil for nil: this process's).
func (u *pgUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), NoSetGroups: true}
}

// pgCredential returns the unprivileged user to run initdb and postgres as
// when this process is root: "postgres", which the Debian package creates,
// or $DLOCK_PG_OSUSER.
func pgCredential() (*pgUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	name := env("DLOCK_PG_OSUSER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("testenv: running as root, PostgreSQL must run as an unprivileged user: %w (scripts/install-backends.sh creates %q)", err, name)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &pgUser{uid: uid, gid: gid}, nil
}

// StartPostgres initialises a cluster with initdb in a temporary directory
// and starts postgres on a free loopback port, with the role dlock
// (password dlockpw, member of pg_signal_backend) owning the database dlock.
// Close it when done.
func StartPostgres(ctx context.Context, opts *PGOptions) (*Server, error) {
	if dockerMode() {
		return startDockerPostgres(ctx, opts)
	}
	if opts == nil {
		opts = &PGOptions{}
	}
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	// SIGINT: fast shutdown.
	return startLocal(KindPostgres, syscall.SIGINT, func(s *Server) error { return startPostgres(ctx, s, bin, cred, opts) })
}

// startPostgres initialises s's cluster and starts the server. The first
// start is ready when the superuser answers over the socket; then it
// creates the dlock role and database, and from then on readiness is a
// TCP round trip as dlock.
func startPostgres(ctx context.Context, s *Server, bin string, cred *pgUser, opts *PGOptions) error {
	data, sock := filepath.Join(s.Dir, "data"), filepath.Join(s.Dir, "sock")
	if err := os.Mkdir(sock, 0o755); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := initPostgres(ctx, s.Dir, bin, cred, data); err != nil {
		return err
	}
	s.Settings = pgSettings(opts)
	var port int
	s.command = func() *exec.Cmd {
		args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", sock,
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
			"-c", "shared_buffers=32MB", "-c", "logging_collector=off",
			"-c", "dynamic_shared_memory_type=posix"}
		for _, k := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
			args = append(args, "-c", k+"="+s.Settings[k])
		}
		for _, c := range opts.Config {
			args = append(args, "-c", c)
		}
		cmd := newCmd(cred.credential(), s.Dir, filepath.Join(bin, "postgres"), args...)
		cmd.Env = pgEnv()
		return cmd
	}
	superuser := func() string {
		return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", sock, port)
	}
	s.ready = func(ctx context.Context) error { return pgPing(ctx, superuser(), s) }
	err := s.startOnFreePort(ctx, func() error {
		ps, err := freePorts(1)
		if err != nil {
			return err
		}
		port = ps[0]
		s.Addr = loopback(port)
		s.URL = fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", User, Password, s.Addr, Database)
		s.DSN = s.URL
		return nil
	})
	if err != nil {
		return err
	}
	if err := pgSetup(ctx, superuser()); err != nil {
		return err
	}
	s.ready = func(ctx context.Context) error { return pgPing(ctx, s.DSN, s) }
	return s.waitReady(ctx, nil)
}

// pgSettings are the durability settings a server starts with, and the
// settings of opts.Config.
func pgSettings(opts *PGOptions) map[string]string {
	on := "off"
	if opts.Durable {
		on = "on"
	}
	settings := map[string]string{"fsync": on, "synchronous_commit": on, "full_page_writes": on}
	for _, c := range opts.Config {
		if k, v, ok := strings.Cut(c, "="); ok {
			settings[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return settings
}

// initPostgres runs initdb on data (in dir, owned by cred's user when this
// process is root), with the superuser postgres.
func initPostgres(ctx context.Context, dir, bin string, cred *pgUser, data string) error {
	if cred != nil {
		if err := chownTree(dir, cred.uid, cred.gid); err != nil {
			return err
		}
	}
	pwfile := filepath.Join(dir, "pwfile")
	_ = os.WriteFile(pwfile, []byte("postgres\n"), 0o600)
	if cred != nil {
		_ = os.Chown(pwfile, cred.uid, cred.gid)
	}
	defer os.Remove(pwfile)
	initdb := newCmd(cred.credential(), dir, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--pwfile", pwfile, "-E", "UTF8", "--locale=C", "--auth-local=trust",
		"--auth-host=scram-sha-256", "--no-sync")
	initdb.Env = pgEnv()
	return runCmd(ctx, initdb)
}

func pgEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC"}
}

func pgPing(ctx context.Context, connString string, s *Server) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("testenv: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	return pgConn(conn).ping(ctx, s, "SHOW server_version")
}

func pgSetup(ctx context.Context, superuser string) error {
	conn, err := pgx.Connect(ctx, superuser)
	if err != nil {
		return fmt.Errorf("testenv: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	return pgConn(conn).run(ctx,
		"CREATE ROLE "+User+" LOGIN PASSWORD '"+Password+"'",
		"CREATE DATABASE "+Database+" OWNER "+User,
		"GRANT pg_signal_backend TO "+User)
}

func pgConn(conn *pgx.Conn) sqlConn {
	return sqlConn{
		kind:  "postgres",
		query: func(ctx context.Context, q string, dest any) error { return conn.QueryRow(ctx, q).Scan(dest) },
		exec: func(ctx context.Context, q string) error {
			_, err := conn.Exec(ctx, q)
			return err
		},
	}
}

func chownTree(dir string, uid, gid int) error {
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	return os.Chmod(dir, 0o755)
}
