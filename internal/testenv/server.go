package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server kinds, as in Server.Kind and Require.
const (
	KindRedis     = "redis"
	KindZooKeeper = "zookeeper"
	KindPostgres  = "postgres"
	KindMySQL     = "mysql"
	KindEtcd      = "etcd"
)

// Fixed credentials of the SQL servers testenv starts.
const (
	User     = "dlock"
	Password = "dlockpw"
	Database = "dlock"
)

// ErrExternal is returned by the process controls (Kill, Pause, Start, ...)
// of a server testenv did not start: one named by a DLOCK_TEST_*_URL
// variable.
var ErrExternal = errors.New("testenv: external server: fault injection unavailable")

// ErrShared is returned by the process controls of a server shared by the
// whole test binary (Redis, Postgres, ...): a test that needs to kill or
// pause a server must start its own with NewRedis, NewPostgres, ...
var ErrShared = errors.New("testenv: shared server: use a dedicated one (NewRedis, NewPostgres, ...) for fault injection")

// Server is one running server process, or an external server named by a
// DLOCK_TEST_*_URL environment variable.
type Server struct {
	// Kind is KindRedis, KindZooKeeper, KindPostgres, KindMySQL or KindEtcd.
	Kind string
	// Addr is the client address, host:port.
	Addr string
	// URL is the dlock URL of the server (see the package doc).
	URL string
	// DSN is what the backend's own Go client takes to open a raw
	// connection: the host:port for Redis and ZooKeeper, a pgx connection
	// URL for PostgreSQL, a go-sql-driver/mysql DSN for MySQL.
	DSN string
	// StartupTime is the time from the start of the Start... call to the
	// server's first successful round trip, including any data-directory
	// initialisation (initdb, mariadb-install-db). Zero for external ones.
	StartupTime time.Duration
	// Version is the server's version as it reports it (may be empty).
	Version string
	// Settings are the durability-relevant settings the server was started
	// with (fsync, appendfsync, forceSync, innodb_flush_log_at_trx_commit,
	// ...), for benchmark reports.
	Settings map[string]string
	// Dir is the server's temporary directory (data, config, log); empty
	// for external servers.
	Dir string

	external bool
	shared   bool
	// stopSig asks the server to shut down cleanly.
	stopSig syscall.Signal
	// command builds the command line that (re)starts the server.
	command func() *exec.Cmd
	// ready makes one protocol round trip; nil error means ready.
	ready func(ctx context.Context) error
	// container is the Docker container id when started with
	// DLOCK_TESTENV=docker.
	container string

	mu     sync.Mutex
	proc   *proc
	closed bool
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error
}

// External reports whether the server came from a DLOCK_TEST_*_URL
// variable: testenv does not control its process.
func (s *Server) External() bool { return s.external }

// Pid returns the server's process id (its process group id too), or 0 when
// it is not running, is external or runs in Docker.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// LogPath returns the file the server writes its output to ("" when it is
// external or in Docker).
func (s *Server) LogPath() string {
	if s.Dir == "" {
		return ""
	}
	return filepath.Join(s.Dir, "server.log")
}

func (s *Server) String() string { return s.Kind + " " + s.Addr }

func (s *Server) controllable() error {
	switch {
	case s.external:
		return ErrExternal
	case s.shared:
		return ErrShared
	}
	return nil
}

// Start (re)starts a stopped or killed server on the same port with the same
// data directory, and waits until it answers or ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if err := s.controllable(); err != nil {
		return err
	}
	return s.start(ctx)
}

func (s *Server) start(ctx context.Context) error {
	if s.container != "" {
		if err := docker(ctx, "start", s.container); err != nil {
			return err
		}
		return s.waitReady(ctx, nil)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("testenv: %s: closed", s)
	}
	if s.proc != nil {
		s.mu.Unlock()
		return fmt.Errorf("testenv: %s: already running", s)
	}
	cmd := s.command()
	logf, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("testenv: %w", err)
	}
	fmt.Fprintf(logf, "\n=== testenv: starting %s at %s\n", filepath.Base(cmd.Path), time.Now().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := spawn(cmd); err != nil {
		logf.Close()
		s.mu.Unlock()
		return fmt.Errorf("testenv: start %s: %w", cmd.Path, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	s.proc = p
	s.mu.Unlock()
	if err := s.waitReady(ctx, p); err != nil {
		_ = s.killNow()
		return err
	}
	return nil
}

// waitReady polls the readiness check until it succeeds, the process exits
// or ctx ends.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	var last error
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.ready(actx)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-exited:
			return &startError{server: s, msg: fmt.Sprintf("exited (%v) before it was ready", p.err), log: s.logTail(3000)}
		case <-ctx.Done():
			return &startError{server: s, msg: fmt.Sprintf("not ready: %v (last check: %v)", ctx.Err(), last), log: s.logTail(3000)}
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// startError reports a server that did not come up, with the end of its log.
type startError struct {
	server *Server
	msg    string
	log    string
}

func (e *startError) Error() string {
	s := fmt.Sprintf("testenv: %s: %s", e.server, e.msg)
	if e.log != "" {
		s += "\n--- end of " + e.server.LogPath() + ":\n" + e.log
	}
	return s
}

// startLocal is how every server run from a local binary starts: in a new
// directory, by start, which runs its binary (a server of kind, which
// stopSig asks to shut down cleanly). The server is closed when start
// fails; StartupTime counts from the directory's creation.
func startLocal(kind string, stopSig syscall.Signal, start func(s *Server) error) (*Server, error) {
	t0 := time.Now()
	dir, err := newDir(kind)
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: kind, Dir: dir, stopSig: stopSig}
	if err := start(s); err != nil {
		s.close()
		return nil, err
	}
	s.StartupTime = time.Since(t0)
	return s, nil
}

// retryBind calls start until it succeeds or fails for another reason than
// a port taken between choosing it and binding it (another process was
// quicker), at most six times.
func retryBind(ctx context.Context, start func() error) error {
	for attempt := 0; ; attempt++ {
		err := start()
		if err == nil || attempt == 5 || !bindFailure(err) || ctx.Err() != nil {
			return err
		}
	}
}

// startOnFreePort starts s on a free loopback port: listen chooses the
// port and sets s up for it, each time the start is retried.
func (s *Server) startOnFreePort(ctx context.Context, listen func() error) error {
	return retryBind(ctx, func() error {
		if err := listen(); err != nil {
			return err
		}
		return s.start(ctx)
	})
}

// sqlConn is a connection to a SQL server as the readiness checks and the
// set-up of PostgreSQL and MySQL use it, whatever the client library.
type sqlConn struct {
	kind  string // in errors: "postgres", "mysql"
	query func(ctx context.Context, q string, dest any) error
	exec  func(ctx context.Context, q string) error
}

// ping checks that the server answers SELECT 1, and records its version
// (versionSQL) in s the first time.
func (c sqlConn) ping(ctx context.Context, s *Server, versionSQL string) error {
	var one int
	if err := c.query(ctx, "SELECT 1", &one); err != nil {
		return fmt.Errorf("testenv: %s: %w", c.kind, err)
	}
	if s != nil && s.Version == "" {
		var v string
		if c.query(ctx, versionSQL, &v) == nil {
			s.Version = v
		}
	}
	return nil
}

// run executes set-up statements in order.
func (c sqlConn) run(ctx context.Context, stmts ...string) error {
	for _, q := range stmts {
		if err := c.exec(ctx, q); err != nil {
			return fmt.Errorf("testenv: %s: set-up: %w", c.kind, err)
		}
	}
	return nil
}

// poll calls check every 50ms until it returns nil or ctx ends; the error
// then says what was awaited and check's last error.
func poll(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startTogether starts every member of an ensemble or cluster before
// waiting for any (a member is not ready until a quorum is up). Its error
// is a bind failure when one member had one, so that retryBind sees it.
func startTogether(ctx context.Context, servers []*Server) error {
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.start(ctx) }()
	}
	var errs []error
	for range servers {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		if bindFailure(err) {
			return err
		}
	}
	return errors.Join(errs...)
}

// closeServers closes every server of a cluster or ensemble.
func closeServers(servers []*Server) error {
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// bindFailure reports whether a start failed because the port was taken.
func bindFailure(err error) bool {
	var se *startError
	if !errors.As(err, &se) {
		return false
	}
	l := strings.ToLower(se.log)
	return strings.Contains(l, "address already in use") || strings.Contains(l, "could not bind") ||
		strings.Contains(l, "bind on tcp/ip port") || strings.Contains(l, "bindexception")
}

func (s *Server) logTail(n int) string {
	if s.Dir == "" {
		return ""
	}
	b, err := os.ReadFile(s.LogPath())
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Stop shuts the server down cleanly (SIGTERM, or SIGINT for PostgreSQL)
// and waits for it to exit; the data directory is kept for Start. A server
// that does not stop within 30s is killed.
func (s *Server) Stop() error {
	if err := s.controllable(); err != nil {
		return err
	}
	if s.container != "" {
		return docker(context.Background(), "stop", "-t", "30", s.container)
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	pid := p.cmd.Process.Pid
	_ = signalTree(pid, syscall.SIGCONT) // a paused server cannot stop
	_ = syscall.Kill(pid, s.stopSig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
	return s.kill(p)
}

// Kill SIGKILLs the server and every process of its group (fault
// injection) and waits until they are gone; the data directory is kept for
// Start.
func (s *Server) Kill() error {
	if err := s.controllable(); err != nil {
		return err
	}
	return s.killNow()
}

// killNow is Kill without the shared-server check.
func (s *Server) killNow() error {
	if s.container != "" {
		return docker(context.Background(), "kill", s.container)
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return s.kill(p)
}

func (s *Server) kill(p *proc) error {
	pid := p.cmd.Process.Pid
	tree := killTree(pid)
	var err error
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("testenv: %s: pid %d did not exit after SIGKILL", s, pid)
	}
	if !reapTree(pid, tree, 10*time.Second) && err == nil {
		err = fmt.Errorf("testenv: %s: processes of %d still alive after SIGKILL", s, pid)
	}
	s.mu.Lock()
	if s.proc == p {
		s.proc = nil
	}
	s.mu.Unlock()
	return err
}

// Restart kills the server and starts it again on the same port with the
// same data.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Pause stops every process of the server with SIGSTOP (fault injection: a
// server that accepts connections but never answers).
func (s *Server) Pause() error { return s.signalGroup("pause", syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signalGroup("unpause", syscall.SIGCONT) }

func (s *Server) signalGroup(dockerVerb string, sig syscall.Signal) error {
	if err := s.controllable(); err != nil {
		return err
	}
	if s.container != "" {
		return docker(context.Background(), dockerVerb, s.container)
	}
	pid := s.Pid()
	if pid == 0 {
		return fmt.Errorf("testenv: %s: not running", s)
	}
	if err := signalTree(pid, sig); err != nil {
		return fmt.Errorf("testenv: %s: %v: %w", s, sig, err)
	}
	return nil
}

// Close kills the server and removes its directory. It is idempotent, and
// a no-op for external servers.
func (s *Server) Close() error {
	if s.external {
		return nil
	}
	if s.shared {
		return ErrShared
	}
	return s.close()
}

func (s *Server) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var err error
	if s.container != "" {
		err = docker(context.Background(), "rm", "-f", "-v", s.container)
	} else {
		err = s.killNow()
	}
	if s.Dir != "" {
		if rerr := os.RemoveAll(s.Dir); rerr != nil && err == nil {
			err = fmt.Errorf("testenv: %w", rerr)
		}
	}
	return err
}

// spawn starts cmd from one goroutine locked to an OS thread that never
// exits: Linux's parent-death signal fires when the thread that forked the
// child exits, not the process, so forking from an arbitrary Go thread could
// kill a server early.
func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			becomeSubreaper()
			for r := range spawner.reqs {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, res: res}
	return <-res
}

var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

// newCmd builds a command with the process attributes every server gets.
func newCmd(cred *syscall.Credential, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr(cred)
	return cmd
}

// runCmd runs a setup command (initdb, mariadb-install-db) to completion,
// with the same process attributes as servers, and returns its output in
// the error when it fails.
func runCmd(ctx context.Context, cmd *exec.Cmd) error {
	logPath := filepath.Join(cmd.Dir, "setup.log")
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("testenv: %s: %w", cmd.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		tree := killTree(cmd.Process.Pid)
		<-done
		reapTree(cmd.Process.Pid, tree, 5*time.Second)
		err = ctx.Err()
	}
	if err != nil {
		out, _ := os.ReadFile(logPath)
		if len(out) > 3000 {
			out = out[len(out)-3000:]
		}
		return fmt.Errorf("testenv: %s %s: %w\n%s", filepath.Base(cmd.Path), strings.Join(cmd.Args[1:], " "), err, out)
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before the server binds it: starters retry
// with new ports when a server fails to bind.
//
// A variable so that a test can hand out a taken port.
var freePorts = freeLoopbackPorts

func freeLoopbackPorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testenv: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// tempDirPrefix names every directory testenv creates, so that a later run
// can remove those whose test binary died without cleaning up.
const tempDirPrefix = "dlock-testenv-"

// newDir creates the temporary directory of one server and records the
// owning process, removing first (once per process) the directories of
// owners that are gone.
func newDir(kind string) (string, error) {
	sweepOnce.Do(sweepStale)
	dir, err := os.MkdirTemp(baseDir(), tempDirPrefix+kind+"-")
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	return dir, nil
}

// baseDir is where server directories go: $DLOCK_TESTENV_DIR, else the
// system temp dir. Unix socket paths must stay short (about 100 bytes), so
// a deep TMPDIR is replaced by /tmp.
func baseDir() string {
	if d := os.Getenv("DLOCK_TESTENV_DIR"); d != "" {
		return d
	}
	d := os.TempDir()
	if len(d) > 40 {
		return "/tmp"
	}
	return d
}

var sweepOnce sync.Once

func sweepStale() {
	matches, _ := filepath.Glob(filepath.Join(baseDir(), tempDirPrefix+"*"))
	for _, m := range matches {
		b, err := os.ReadFile(filepath.Join(m, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() || !processGone(pid) {
			continue
		}
		_ = os.RemoveAll(m)
	}
}

// env returns the value of the first of names that is set.
func env(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// lookPath finds a binary on PATH or in the extra directories (sbin and
// Homebrew directories are often not on a user's PATH).
func lookPath(name string, extra ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range append(extra, "/usr/sbin", "/usr/local/sbin", "/sbin", "/opt/homebrew/bin", "/opt/homebrew/sbin", "/usr/local/bin") {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &missingError{what: name}
}

// missingError reports a server binary that is not installed: the test
// helpers skip (or fail under DLOCK_REQUIRE_BACKENDS=1) on it.
type missingError struct{ what string }

func (e *missingError) Error() string {
	return "testenv: " + e.what + " not found; run scripts/install-backends.sh"
}

// IsMissing reports whether err says a server binary is not installed.
func IsMissing(err error) bool {
	var me *missingError
	return errors.As(err, &me)
}
