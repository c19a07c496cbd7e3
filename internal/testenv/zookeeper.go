package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ZKOptions configure StartZooKeeper, NewZooKeeper and the ensembles.
type ZKOptions struct {
	// ForceSync makes ZooKeeper fsync its transaction log on every write
	// (-Dzookeeper.forceSync=yes, ZooKeeper's own default). By default it
	// is off: much faster, and what the benchmark reports as "forceSync=no".
	ForceSync bool
	// TickTime is ZooKeeper's tick (default 500ms). minSessionTimeout is
	// fixed at 1s and maxSessionTimeout at 60s whatever the tick.
	TickTime time.Duration
}

// zkInstall is how to run ZooKeeper's server class from the installed jars.
type zkInstall struct {
	java      string
	classpath string
}

// findZooKeeper locates java and ZooKeeper's jars: $DLOCK_ZK_CLASSPATH if
// set; the Debian packages (zookeeper's configuration directory from
// `dpkg -L zookeeper`, /usr/share/java/zookeeper.jar, whose manifest
// Class-Path names its dependency jars in /usr/share/java); or a tarball
// or Homebrew install under $ZOOKEEPER_HOME (lib/*.jar and conf/).
//
// Debian's zkServer.sh is not used: it misreads a configuration directory
// given to it; the server class is run directly.
func findZooKeeper() (*zkInstall, error) {
	java, err := lookPath("java")
	if err != nil {
		return nil, &missingError{what: "java (for ZooKeeper)"}
	}
	if cp := os.Getenv("DLOCK_ZK_CLASSPATH"); cp != "" {
		return &zkInstall{java: java, classpath: cp}, nil
	}
	var cp []string
	if jar := "/usr/share/java/zookeeper.jar"; fileExists(jar) {
		if conf := debianZKConfDir(); conf != "" {
			cp = append(cp, conf)
		}
		cp = append(cp, jar)
		// The manifest names slf4j-api but no binding: add the simple one so
		// the server's log lands in server.log instead of nowhere.
		if j := "/usr/share/java/slf4j-simple.jar"; fileExists(j) {
			cp = append(cp, j)
		}
		return &zkInstall{java: java, classpath: strings.Join(cp, ":")}, nil
	}
	homes := []string{os.Getenv("ZOOKEEPER_HOME"), "/opt/homebrew/opt/zookeeper/libexec", "/usr/local/opt/zookeeper/libexec", "/opt/zookeeper"}
	for _, h := range homes {
		if h == "" {
			continue
		}
		jars, _ := filepath.Glob(filepath.Join(h, "lib", "*.jar"))
		if more, _ := filepath.Glob(filepath.Join(h, "zookeeper-*.jar")); len(more) > 0 {
			jars = append(jars, more...)
		}
		if len(jars) == 0 {
			continue
		}
		if fileExists(filepath.Join(h, "conf")) {
			cp = append(cp, filepath.Join(h, "conf"))
		}
		cp = append(cp, jars...)
		return &zkInstall{java: java, classpath: strings.Join(cp, ":")}, nil
	}
	return nil, &missingError{what: "ZooKeeper (zookeeper.jar)"}
}

// debianZKConfDir returns the configuration directory of the Debian
// package (from `dpkg -L zookeeper`), or "".
func debianZKConfDir() string {
	out, err := exec.Command("dpkg", "-L", "zookeeper").Output()
	if err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasSuffix(l, "/log4j.properties") {
				d := filepath.Dir(l)
				if fileExists("/etc/zookeeper/conf") && strings.HasPrefix(d, "/etc/zookeeper/") {
					return "/etc/zookeeper/conf" // the alternatives link to the active one
				}
				return d
			}
		}
	}
	if fileExists("/etc/zookeeper/conf") {
		return "/etc/zookeeper/conf"
	}
	return ""
}

// zkNode is the configuration of one ZooKeeper server.
type zkNode struct {
	id                           int
	client, peer, election, tick int
}

// StartZooKeeper starts a standalone ZooKeeper server on a free loopback
// port. Close it when done.
func StartZooKeeper(ctx context.Context, opts *ZKOptions) (*Server, error) {
	if dockerMode() {
		return startDockerZooKeeper(ctx, opts)
	}
	e, err := startZK(ctx, 1, opts)
	if err != nil {
		return nil, err
	}
	return e.Servers[0], nil
}

// Ensemble is a ZooKeeper ensemble on loopback.
type Ensemble struct {
	// Servers are the members, by myid (1..n).
	Servers []*Server
	// URL is "zk://127.0.0.1:P1,127.0.0.1:P2,...".
	URL string
	// Addrs are the members' client addresses.
	Addrs []string
	// StartupTime is the time until every member was serving.
	StartupTime time.Duration

	shared bool
}

// StartZooKeeperEnsemble starts n (3 or more, odd) ZooKeeper servers forming
// one ensemble on loopback and waits until every one serves as leader or
// follower. Close it when done.
func StartZooKeeperEnsemble(ctx context.Context, n int, opts *ZKOptions) (*Ensemble, error) {
	if n < 3 {
		return nil, fmt.Errorf("testenv: a zookeeper ensemble needs at least 3 servers, not %d", n)
	}
	if dockerMode() {
		return nil, fmt.Errorf("testenv: zookeeper ensemble: %w", errDockerUnsupported)
	}
	return startZK(ctx, n, opts)
}

func startZK(ctx context.Context, n int, opts *ZKOptions) (*Ensemble, error) {
	if opts == nil {
		opts = &ZKOptions{}
	}
	inst, err := findZooKeeper()
	if err != nil {
		return nil, err
	}
	tick := 500
	if opts.TickTime > 0 {
		tick = int(opts.TickTime / time.Millisecond)
	}
	forceSync := "no"
	if opts.ForceSync {
		forceSync = "yes"
	}
	t0 := time.Now()
	var e *Ensemble
	err = retryBind(ctx, func() (err error) {
		e, err = tryStartZK(ctx, inst, n, tick, forceSync)
		return err
	})
	if err != nil {
		return nil, err
	}
	e.StartupTime = time.Since(t0)
	for _, s := range e.Servers {
		s.StartupTime = e.StartupTime
	}
	return e, nil
}

func tryStartZK(ctx context.Context, inst *zkInstall, n, tick int, forceSync string) (*Ensemble, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	nodes := make([]zkNode, n)
	for i := range nodes {
		nodes[i] = zkNode{id: i + 1, client: ports[3*i], peer: ports[3*i+1], election: ports[3*i+2], tick: tick}
	}
	e := &Ensemble{}
	for _, nd := range nodes {
		s, err := newZKServer(inst, nd, nodes, forceSync)
		if err != nil {
			e.close()
			return nil, err
		}
		e.Servers = append(e.Servers, s)
		e.Addrs = append(e.Addrs, s.Addr)
	}
	e.URL = "zk://" + strings.Join(e.Addrs, ",")
	if err := startTogether(ctx, e.Servers); err != nil {
		e.close()
		return nil, err
	}
	if n > 1 {
		if err := e.WaitServing(ctx); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

func newZKServer(inst *zkInstall, nd zkNode, all []zkNode, forceSync string) (*Server, error) {
	dir, err := newDir("zookeeper")
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: KindZooKeeper, Dir: dir, stopSig: syscall.SIGTERM,
		Settings: map[string]string{"forceSync": forceSync, "tickTime": strconv.Itoa(nd.tick) + "ms"}}
	s.Addr = loopback(nd.client)
	s.DSN = s.Addr
	s.URL = "zk://" + s.Addr
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	cfg := []string{
		"tickTime=" + strconv.Itoa(nd.tick),
		"initLimit=20",
		"syncLimit=10",
		"dataDir=" + data,
		"clientPort=" + strconv.Itoa(nd.client),
		"clientPortAddress=127.0.0.1",
		"minSessionTimeout=1000",
		"maxSessionTimeout=60000",
		"maxClientCnxns=0",
		"4lw.commands.whitelist=*",
		"admin.enableServer=false",
		"autopurge.purgeInterval=0",
	}
	if len(all) > 1 {
		for _, o := range all {
			cfg = append(cfg, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", o.id, o.peer, o.election))
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(nd.id)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
	}
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	s.command = func() *exec.Cmd {
		return newCmd(nil, dir, inst.java,
			"-Xmx256m", "-Xms32m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.forceSync="+forceSync,
			"-Dzookeeper.preAllocSize=1024", // KB: no 64MB log file per server
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-Dzookeeper.log.dir="+dir,
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
			"-Dorg.slf4j.simpleLogger.showDateTime=true",
			"-cp", inst.classpath,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
	}
	standalone := len(all) == 1
	s.ready = func(ctx context.Context) error {
		if err := zkReady(ctx, s.Addr, standalone); err != nil {
			return err
		}
		// The answer must come from our server, not from another one that
		// took the port first (this one then fails to bind).
		conf, err := ZKCommand(ctx, s.Addr, "conf")
		if err != nil {
			return err
		}
		if !strings.Contains(conf, data) {
			return fmt.Errorf("testenv: zookeeper %s: answered by another server", s.Addr)
		}
		if s.Version == "" {
			if out, err := ZKCommand(ctx, s.Addr, "srvr"); err == nil {
				v := infoField(out, "Zookeeper version")
				s.Version, _, _ = strings.Cut(strings.TrimSpace(v), "-")
			}
		}
		return nil
	}
	return s, nil
}

// zkReady is ruok → imok; a standalone server must also serve (srvr shows
// a Mode). A member of an ensemble is ready when it answers: whether it
// serves depends on a quorum, which Ensemble.WaitServing checks.
func zkReady(ctx context.Context, addr string, serving bool) error {
	out, err := ZKCommand(ctx, addr, "ruok")
	if err != nil {
		return err
	}
	if out != "imok" {
		return fmt.Errorf("testenv: zookeeper %s: ruok answered %q", addr, out)
	}
	if serving {
		if _, err := zkMode(ctx, addr); err != nil {
			return err
		}
	}
	return nil
}

// ZKCommand sends a four-letter word (ruok, srvr, stat, mntr, ...) to the
// ZooKeeper server at addr and returns its answer.
func ZKCommand(ctx context.Context, addr, word string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("testenv: zookeeper: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if _, err := io.WriteString(c, word); err != nil {
		return "", fmt.Errorf("testenv: zookeeper: %w", err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("testenv: zookeeper: %s: %w", word, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// zkMode returns the Mode srvr reports: leader, follower or standalone.
func zkMode(ctx context.Context, addr string) (string, error) {
	out, err := ZKCommand(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	m := strings.TrimSpace(infoField(out, "Mode"))
	if m == "" {
		return "", fmt.Errorf("testenv: zookeeper %s: not serving: %q", addr, out)
	}
	return m, nil
}

// WaitServing waits until every member answers srvr with Mode leader or
// follower (after killing and restarting members, say).
func (e *Ensemble) WaitServing(ctx context.Context) error {
	return poll(ctx, "zookeeper ensemble not serving", func() error {
		for _, s := range e.Servers {
			m, err := zkMode(ctx, s.Addr)
			if err != nil {
				return err
			}
			if m != "leader" && m != "follower" {
				return fmt.Errorf("testenv: zookeeper %s: mode %s", s.Addr, m)
			}
		}
		return nil
	})
}

// Leader returns the member that srvr reports as leader.
func (e *Ensemble) Leader() (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range e.Servers {
		if m, err := zkMode(ctx, s.Addr); err == nil && m == "leader" {
			return s, nil
		}
	}
	return nil, errors.New("testenv: zookeeper ensemble: no leader")
}

// Close closes every member.
func (e *Ensemble) Close() error {
	if e.shared {
		return ErrShared
	}
	return e.close()
}

func (e *Ensemble) close() error { return closeServers(e.Servers) }
