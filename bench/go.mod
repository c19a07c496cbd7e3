module github.com/dlock-go/dlock/bench

go 1.26.0

// The benchmark is its own module so that the library's go.mod never
// requires the peer libraries or HdrHistogram.
replace github.com/dlock-go/dlock => ../

// The etcd driver is a module of its own (its client pulls in grpc); the
// etcd floor and etcd's concurrency.Mutex (the peer) use that client too.
replace github.com/dlock-go/dlock/etcd => ../etcd

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/bsm/redislock v0.9.4 // peer
	github.com/dlock-go/dlock v0.0.0
	github.com/dlock-go/dlock/etcd v0.0.0
	// peer. Pinned: v4.16+ require rueidiscompat versions (v1.0.71+) that the module proxy
	// refuses (403), so `go mod tidy` fails with them; v4.15.0 tidies cleanly.
	github.com/go-redsync/redsync/v4 v4.15.0
	github.com/go-sql-driver/mysql v1.10.1 // indirect
	github.com/go-zookeeper/zk v1.0.4 // peer (zk.Lock) and the ZooKeeper floor
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0
	go.etcd.io/etcd/client/v3 v3.5.35 // the etcd floor and peer (concurrency.Mutex)
	go.uber.org/zap v1.17.0 // the etcd client's logger, silenced
	golang.org/x/sys v0.49.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coreos/go-semver v0.3.0 // indirect
	github.com/coreos/go-systemd/v22 v22.3.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.etcd.io/etcd/api/v3 v3.5.35 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.35 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
