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
	"time"

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

// pgCredential returns the unprivileged user to run initdb and postgres as
// when this process is root (both refuse to run as root): "postgres", which
// the Debian package creates.
func pgCredential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	name := env("DLOCK_PG_OSUSER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("testenv: running as root, PostgreSQL must run as an unprivileged user: %w (scripts/install-backends.sh creates %q)", err, name)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, uid, gid, nil
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
	cred, uid, gid, err := pgCredential()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	dir, err := newDir("postgres")
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: KindPostgres, Dir: dir, stopSig: syscall.SIGINT} // SIGINT: fast shutdown
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o755); err != nil {
		s.close()
		return nil, fmt.Errorf("testenv: %w", err)
	}
	if cred != nil {
		if err := chownTree(dir, uid, gid); err != nil {
			s.close()
			return nil, err
		}
	}
	pwfile := filepath.Join(dir, "pwfile")
	_ = os.WriteFile(pwfile, []byte("postgres\n"), 0o600)
	if cred != nil {
		_ = os.Chown(pwfile, uid, gid)
	}
	initdb := newCmd(cred, dir, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--pwfile", pwfile, "-E", "UTF8", "--locale=C", "--auth-local=trust",
		"--auth-host=scram-sha-256", "--no-sync")
	initdb.Env = pgEnv()
	if err := runCmd(ctx, initdb); err != nil {
		s.close()
		return nil, err
	}
	_ = os.Remove(pwfile)

	s.Settings = map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
	if opts.Durable {
		s.Settings = map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
	}
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
		cmd := newCmd(cred, dir, filepath.Join(bin, "postgres"), args...)
		cmd.Env = pgEnv()
		return cmd
	}
	for _, c := range opts.Config {
		if k, v, ok := strings.Cut(c, "="); ok {
			s.Settings[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	// First start: ready when the superuser answers over the socket; then
	// create the dlock role and database, and from then on readiness is a
	// TCP round trip as dlock.
	superuser := func() string {
		return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", sock, port)
	}
	s.ready = func(ctx context.Context) error { return pgPing(ctx, superuser(), s) }
	for attempt := 0; ; attempt++ {
		ps, err := freePorts(1)
		if err != nil {
			s.close()
			return nil, err
		}
		port = ps[0]
		s.Addr = loopback(port)
		s.URL = fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", User, Password, s.Addr, Database)
		s.DSN = s.URL
		err = s.start(ctx)
		if err == nil {
			break
		}
		if attempt < 5 && bindFailure(err) && ctx.Err() == nil {
			continue
		}
		s.close()
		return nil, err
	}
	if err := pgSetup(ctx, superuser()); err != nil {
		s.close()
		return nil, err
	}
	s.ready = func(ctx context.Context) error { return pgPing(ctx, s.DSN, s) }
	if err := s.waitReady(ctx, nil); err != nil {
		s.close()
		return nil, err
	}
	s.StartupTime = time.Since(t0)
	return s, nil
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
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("testenv: postgres: %w", err)
	}
	if s != nil && s.Version == "" {
		var v string
		if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
			s.Version = v
		}
	}
	return nil
}

func pgSetup(ctx context.Context, superuser string) error {
	conn, err := pgx.Connect(ctx, superuser)
	if err != nil {
		return fmt.Errorf("testenv: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"CREATE ROLE " + User + " LOGIN PASSWORD '" + Password + "'",
		"CREATE DATABASE " + Database + " OWNER " + User,
		"GRANT pg_signal_backend TO " + User,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("testenv: postgres: set-up: %w", err)
		}
	}
	return nil
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
