// Package testenv starts real servers for dlock's tests and benchmarks:
// Redis (single, independent nodes for Redlock, Redis Cluster), ZooKeeper
// (standalone, ensemble), PostgreSQL and MariaDB/MySQL. Nothing here is a
// mock: each server is the installed binary, started on free loopback ports
// in a temporary directory, ready once it has answered a real protocol round
// trip, and stopped at the end.
//
// # Test helpers
//
// Tests call the helpers, which take a testing.TB, register t.Cleanup and
// apply the skip/fail policy:
//
//	s := testenv.Redis(t)        // shared by the whole test binary: use unique key names
//	s := testenv.NewRedis(t, &testenv.RedisOptions{Persistence: true}) // dedicated: may Kill, Pause, Restart
//	nodes := testenv.RedisNodes(t, 3)   // independent masters for Redlock (shared per n)
//	c := testenv.RedisCluster(t)        // 3-master Redis Cluster (shared); NewRedisCluster for a dedicated one
//	s := testenv.ZooKeeper(t)           // NewZooKeeper(t, &testenv.ZKOptions{ForceSync: true})
//	e := testenv.ZooKeeperEnsemble(t, 3) // dedicated; e.Leader(), e.WaitServing(ctx)
//	s := testenv.Postgres(t)            // NewPostgres(t, &testenv.PGOptions{Durable: true})
//	s := testenv.MySQL(t)               // NewMySQL(t, nil)
//	testenv.Require(t, testenv.KindRedis) // the skip/fail policy alone
//
// A shared server is started once, lazily (sync.Once), and lives until the
// test binary ends; its process controls return ErrShared, so a test that
// injects faults must start a dedicated server with a New... helper. A
// package may call CloseShared at the end of TestMain (or
// os.Exit(testenv.Run(m))) to stop the shared servers cleanly; otherwise they
// die with the test binary and the next run removes their directories.
//
// # Servers
//
// A *Server has Kind, Addr (host:port), URL (the dlock URL), DSN (what the
// backend's own Go client opens), StartupTime (from the Start... call to the
// first round trip, data-directory initialisation included), Version, and
// Settings: the durability-relevant settings it runs with, for benchmark
// reports. Fault injection: Stop (graceful, data kept), Kill (SIGKILL to the
// process group, data kept), Start (same port, same data directory, waits
// until ready), Restart (Kill+Start), Pause/Resume (SIGSTOP/SIGCONT to the
// group), Pid; Close kills the server and removes its directory.
//
// URLs and DSNs:
//
//	redis       redis://127.0.0.1:PORT/0                 DSN 127.0.0.1:PORT
//	cluster     redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
//	zookeeper   zk://127.0.0.1:PORT                      DSN 127.0.0.1:PORT
//	ensemble    zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
//	postgres    postgres://dlock:dlockpw@127.0.0.1:PORT/dlock?sslmode=disable (DSN the same)
//	mysql       mysql://dlock:dlockpw@127.0.0.1:PORT/dlock  DSN dlock:dlockpw@tcp(127.0.0.1:PORT)/dlock
//
// The SQL servers have the user dlock, password dlockpw, owning the database
// dlock. On PostgreSQL dlock is a member of pg_signal_backend (and may
// pg_terminate_backend its own backends anyway). On MariaDB it has all
// privileges on dlock.* plus PROCESS and CONNECTION ADMIN (CONNECTION_ADMIN
// on MySQL 8, SUPER on older servers), so a test can KILL a connection.
//
// The non-test starters (StartRedis, StartRedisCluster, StartZooKeeper,
// StartZooKeeperEnsemble, StartPostgres, StartMySQL) serve the benchmark
// command too; the caller closes what they return.
//
// How each one runs:
//
//   - Redis: redis-server with a generated redis.conf: no persistence by
//     default; RedisOptions.Persistence turns on appendonly with appendfsync
//     always (a Kill then keeps every acknowledged write); RedisOptions.Config
//     adds lines (maxmemory-policy, ...). Ready: PING → PONG (a small RESP
//     client, RedisDo, so testenv needs no Redis library). A cluster is N
//     servers with cluster-enabled yes (each needs PORT+10000 free for its
//     bus), slots assigned with CLUSTER ADDSLOTS in equal ranges, joined with
//     CLUSTER MEET, ready when every node reports cluster_state:ok (Redis
//     itself holds a fresh master back for about 2s).
//   - ZooKeeper: the server class run directly, java -cp <conf
//     dir>:zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain
//     zoo.cfg, with the files found through `dpkg -L zookeeper` and
//     /usr/share/java (the jar's manifest names its dependency jars), or
//     $ZOOKEEPER_HOME, or $DLOCK_ZK_CLASSPATH (Debian's zkServer.sh misreads a
//     configuration directory and is not used). tickTime 500ms,
//     minSessionTimeout 1s (drivers may use 1–2s sessions), maxSessionTimeout
//     60s, 4lw.commands.whitelist=*, admin.enableServer=false,
//     -Dzookeeper.forceSync=no unless ZKOptions.ForceSync, and a light JVM
//     (-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1). An ensemble has
//     distinct client, peer and election ports and a myid per member. Ready:
//     ruok → imok and srvr showing a Mode (standalone; leader or follower on
//     every member of an ensemble). ZKCommand sends any four-letter word.
//   - PostgreSQL: initdb and postgres from $DLOCK_PG_BINDIR, the newest
//     /usr/lib/postgresql/*/bin, `pg_config --bindir` or PATH. As root (both
//     refuse to run as root) they run as the user postgres (the Debian
//     package creates it; $DLOCK_PG_OSUSER names another) through
//     SysProcAttr.Credential, with the directory owned by it. Started with
//     listen_addresses=127.0.0.1, -k <dir>/sock, and fsync,
//     synchronous_commit and full_page_writes off unless PGOptions.Durable.
//     Ready: connect (pgx) and SELECT 1.
//   - MySQL: MariaDB's mariadbd, initialised with mariadb-install-db
//     --no-defaults --auth-root-authentication-method=normal, or MySQL 8's
//     mysqld --initialize-insecure when that is what is installed
//     ($DLOCK_MYSQLD names the binary); run with --no-defaults, bind-address
//     127.0.0.1, a socket in the directory, --user=root when root,
//     --skip-log-bin, a small InnoDB (32MB buffer pool, 16MB log, no
//     doublewrite) and innodb_flush_log_at_trx_commit=2 unless
//     MySQLOptions.Durable (then 1). The dlock user is created as root over
//     the socket. Ready: connect (go-sql-driver/mysql) and SELECT 1.
//
// # Processes
//
// Every server runs in its own process group with a parent-death signal
// (SysProcAttr{Setpgid: true, Pdeathsig: SIGKILL}), started from one OS
// thread that never exits, so no server outlives a test binary that panics
// or times out. Kill and Close SIGKILL the whole group and wait until no
// process of it is left; this process makes itself the child subreaper so
// that orphaned children (PostgreSQL backends) are reaped here rather than
// left as zombies under a container's PID 1. Ports come from listening on
// 127.0.0.1:0; a start that fails to bind is retried on new ports. Directories
// are named dlock-testenv-* under $DLOCK_TESTENV_DIR or the temp dir, and
// record their owner's pid: those of dead owners are removed on the next
// start. The server's output goes to <Dir>/server.log (LogPath); a start
// that fails reports its end, and the helpers log it when the test failed.
//
// # Environment
//
//   - DLOCK_TEST_REDIS_URL, DLOCK_TEST_ZK_URL, DLOCK_TEST_POSTGRES_URL,
//     DLOCK_TEST_MYSQL_URL: the shared helpers (Redis, ZooKeeper, Postgres,
//     MySQL) return an external Server for that URL instead of starting one
//     (External reports true; its process controls return ErrExternal).
//     DLOCK_TEST_REDIS_NODES, comma-separated redis:// URLs, does the same for
//     RedisNodes. The New... helpers, clusters and ensembles always start
//     their own servers: fault injection needs the process.
//   - A missing server binary: plain `go test` skips the test with a message
//     naming scripts/install-backends.sh; with DLOCK_REQUIRE_BACKENDS=1 (as
//     `make test` sets) the test fails instead. Any other start failure fails
//     the test.
//   - DLOCK_TESTENV=docker starts the servers in Docker containers instead
//     (redis:7, zookeeper:3.8, postgres:16, mysql:8.4) with the same users,
//     settings and readiness checks, published on loopback ports chosen here
//     and kept across docker stop/start. This path drives the docker CLI
//     (docker run -d -p 127.0.0.1:PORT:..., docker kill/stop/start/pause,
//     docker rm -f) rather than testcontainers-go, whose dependency tree
//     (the Docker SDK and its transitive modules) would be far larger than
//     testenv itself; it needs only the docker CLI and an engine. Pid is 0
//     for containers, and Redis Cluster and ZooKeeper ensembles are not
//     offered there (the helpers skip). The default path never touches
//     Docker.
//   - DLOCK_REDIS_SERVER, DLOCK_PG_BINDIR, DLOCK_PG_OSUSER, DLOCK_MYSQLD,
//     DLOCK_ZK_CLASSPATH override where the binaries are found;
//     DLOCK_TESTENV_DIR where the directories go.
//
// Linux is the supported platform; on macOS (Homebrew) servers run the same
// way without the parent-death signal.
package testenv
