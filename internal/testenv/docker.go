package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// dockerMode reports whether DLOCK_TESTENV=docker asks for servers in
// Docker containers instead of local binaries.
func dockerMode() bool { return os.Getenv("DLOCK_TESTENV") == "docker" }

// docker runs the docker CLI and returns its trimmed output in the error.
func docker(ctx context.Context, args ...string) error {
	_, err := dockerOut(ctx, args...)
	return err
}

func dockerOut(ctx context.Context, args ...string) (string, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", &missingError{what: "docker (DLOCK_TESTENV=docker)"}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
	}
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testenv: docker %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// dockerServer runs image with containerPort published on a free loopback
// port (fixed for the container's life, so Stop and Start keep it), and
// waits until ready answers.
func dockerServer(ctx context.Context, s *Server, containerPort int, env []string, image string, args ...string) (*Server, error) {
	t0 := time.Now()
	ps, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	s.Addr = loopback(ps[0])
	run := []string{"run", "-d", "-p", fmt.Sprintf("%s:%d", s.Addr, containerPort), "--label", "dlock-testenv=1"}
	for _, e := range env {
		run = append(run, "-e", e)
	}
	run = append(run, image)
	run = append(run, args...)
	id, err := dockerOut(ctx, run...)
	if err != nil {
		return nil, err
	}
	s.container = id
	if err := s.waitReady(ctx, nil); err != nil {
		s.close()
		return nil, err
	}
	s.StartupTime = time.Since(t0)
	return s, nil
}

func startDockerRedis(ctx context.Context, opts *RedisOptions) (*Server, error) {
	if opts == nil {
		opts = &RedisOptions{}
	}
	args := []string{"redis-server", "--save", "", "--appendonly", "no"}
	if opts.Persistence {
		args = []string{"redis-server", "--save", "", "--appendonly", "yes", "--appendfsync", "always"}
	}
	for _, l := range opts.Config {
		f := strings.Fields(l)
		if len(f) > 0 {
			args = append(args, append([]string{"--" + f[0]}, f[1:]...)...)
		}
	}
	s := &Server{Kind: KindRedis}
	s.ready = func(ctx context.Context) error {
		_, err := RedisDo(ctx, s.Addr, "PING")
		return err
	}
	if _, err := dockerServer(ctx, s, 6379, nil, "redis:7", args...); err != nil {
		return nil, err
	}
	s.DSN = s.Addr
	s.URL = "redis://" + s.Addr + "/0"
	return s, nil
}

func startDockerZooKeeper(ctx context.Context, opts *ZKOptions) (*Server, error) {
	if opts == nil {
		opts = &ZKOptions{}
	}
	forceSync := "no"
	if opts.ForceSync {
		forceSync = "yes"
	}
	s := &Server{Kind: KindZooKeeper, Settings: map[string]string{"forceSync": forceSync}}
	s.ready = func(ctx context.Context) error { return zkReady(ctx, s.Addr, true) }
	env := []string{"ZOO_4LW_COMMANDS_WHITELIST=*", "ZOO_ADMINSERVER_ENABLED=false",
		"ZOO_TICK_TIME=500", "JVMFLAGS=-Xmx256m -Dzookeeper.forceSync=" + forceSync}
	if _, err := dockerServer(ctx, s, 2181, env, "zookeeper:3.8"); err != nil {
		return nil, err
	}
	s.DSN = s.Addr
	s.URL = "zk://" + s.Addr
	return s, nil
}

func startDockerPostgres(ctx context.Context, opts *PGOptions) (*Server, error) {
	if opts == nil {
		opts = &PGOptions{}
	}
	s := &Server{Kind: KindPostgres, Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}}
	if opts.Durable {
		s.Settings = map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
	}
	args := []string{"postgres", "-c", "max_connections=300"}
	for k, v := range s.Settings {
		args = append(args, "-c", k+"="+v)
	}
	for _, c := range opts.Config {
		args = append(args, "-c", c)
	}
	env := []string{"POSTGRES_USER=" + User, "POSTGRES_PASSWORD=" + Password, "POSTGRES_DB=" + Database}
	s.ready = func(ctx context.Context) error {
		s.URL = fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", User, Password, s.Addr, Database)
		s.DSN = s.URL
		return pgPing(ctx, s.DSN, s)
	}
	if _, err := dockerServer(ctx, s, 5432, env, "postgres:16", args...); err != nil {
		return nil, err
	}
	return s, nil
}

func startDockerMySQL(ctx context.Context, opts *MySQLOptions) (*Server, error) {
	if opts == nil {
		opts = &MySQLOptions{}
	}
	flush := "2"
	if opts.Durable {
		flush = "1"
	}
	s := &Server{Kind: KindMySQL, Settings: map[string]string{"innodb_flush_log_at_trx_commit": flush, "log_bin": "OFF"}}
	args := append([]string{"--skip-log-bin", "--innodb-flush-log-at-trx-commit=" + flush, "--max-connections=500"}, opts.Args...)
	env := []string{"MYSQL_ROOT_PASSWORD=" + Password, "MYSQL_USER=" + User, "MYSQL_PASSWORD=" + Password, "MYSQL_DATABASE=" + Database}
	s.ready = func(ctx context.Context) error {
		setMySQLAddr(s)
		return mysqlPing(ctx, s.DSN, s)
	}
	if _, err := dockerServer(ctx, s, 3306, env, "mysql:8.4", args...); err != nil {
		return nil, err
	}
	return s, nil
}

var errDockerUnsupported = errors.New("testenv: not supported with DLOCK_TESTENV=docker")
