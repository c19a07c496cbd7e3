package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/driver"
	dlocketcd "github.com/dlock-go/dlock/etcd"
)

// etcd's rows besides dlock's own: the floor of the etcd driver's
// guarantees, the raw round trip, and etcd's own concurrency.Mutex as the
// peer. They live here, in the benchmark's module, because the etcd client
// (grpc, protobuf, zap) must stay out of the library's module, whose
// internal/floor holds the other floors.

// EtcdTTL is the lease the etcd rows ask for: LeaseTTL, unless it is
// shorter than the etcd driver's MinTTL (etcd refuses shorter leases and
// grants whole seconds), then MinTTL. The etcd targets' notes say which.
func EtcdTTL() time.Duration { return max(LeaseTTL, dlocketcd.MinTTL) }

// etcdTTLSeconds is EtcdTTL in etcd's unit, whole seconds rounded up.
func etcdTTLSeconds() int64 { return int64((EtcdTTL() + time.Second - 1) / time.Second) }

// EtcdTTLNote says the lease of the etcd rows when it is not LeaseTTL
// ("" when it is), as the end of a note.
func EtcdTTLNote() string {
	if EtcdTTL() == LeaseTTL {
		return ""
	}
	return fmt.Sprintf("; lease %v: the benchmark's %v is below etcd's minimum (MinTTL)", EtcdTTL(), LeaseTTL)
}

// etcdNotes are the notes of the etcd targets by Impl.
var etcdNotes = map[string]string{
	"etcd-floor": "an etcd lease of the TTL (a second more from 10 s), reused while it still holds a whole TTL " +
		"(0.9 s after its grant or renewal, as the etcd driver's), renewed or granted otherwise; one transaction: " +
		"put-if-absent (create revision 0) of <queue>/<lease id>-<tag> under that lease, and a read of the " +
		"queue's lowest create revision (held when it is the key's own; the fencing token is that create " +
		"revision, durable before it is returned); delete the key: 2 round trips",
	"etcd-rtt": "a linearizable Get of one key (a read through the leader's quorum check)",
	"etcd Mutex": "go.etcd.io/etcd/client/v3/concurrency Mutex v3.5 as its users write it: one Session per " +
		"client, made once (TTL the common lease, its keep-alive as shipped), a NewMutex per acquisition, Lock and " +
		"Unlock, nothing tuned. Its locks share the session's lease: there is no per-lock TTL, and a lock cannot " +
		"lapse while its holder's session lives (the session keeps every lock alive together). Compared with the " +
		"etcd floor (the same transaction, plus the lease grant the session saves); as with the other peers, its " +
		"tokens are not checked (a user may take Header().Revision as one)",
}

// etcdConfig is the etcd client configuration of a target's URL
// (etcd[s]://[user:password@]host1:2379,host2:2379[/prefix]): the same
// endpoints, credentials and TLS as the driver's.
func etcdConfig(ctx context.Context, raw string) (clientv3.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return clientv3.Config{}, errors.New("bench: etcd: bad URL " + driver.Redact(raw))
	}
	cfg := clientv3.Config{
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	}
	hosts := strings.Split(u.Host, ",")
	proto := "http://"
	if u.Scheme == dlocketcd.SchemeTLS {
		proto = "https://"
		name, _, _ := strings.Cut(hosts[0], ":")
		cfg.TLS = &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	}
	for _, h := range hosts {
		if !strings.Contains(h, ":") {
			h += ":2379"
		}
		cfg.Endpoints = append(cfg.Endpoints, proto+h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	return cfg, nil
}

// dialEtcd opens an etcd client for a target.
func dialEtcd(ctx context.Context, t Target) (*clientv3.Client, error) {
	cfg, err := etcdConfig(ctx, t.URL)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %s", t.Name, driver.Scrub(err.Error(), t.URL))
	}
	return cli, nil
}

// etcdEscape escapes a lock name as the driver does ('%' and '/'), so
// that the keys of two names never share a prefix.
var etcdEscape = strings.NewReplacer("%", "%25", "/", "%2F")

// etcdFloor is the etcd floor of one client.
type etcdFloor struct {
	cli    *clientv3.Client
	prefix string
	ttl    int64 // the TTL, whole seconds
	// revoke takes the leases to revoke off the acquire/release path.
	revoke chan clientv3.LeaseID
	done   chan struct{}
	closed sync.Once

	mu     sync.Mutex
	spares []etcdFloorLease // leases whose key is deleted, for the next use
}

// etcdFloorLease is an etcd lease of the floor's and its key's name.
type etcdFloorLease struct {
	id      clientv3.LeaseID
	tag     uint64    // random, drawn at the grant: the key's name is this grant's own
	renewed time.Time // start of the last grant or renewal
}

// The floor keeps the etcd driver's lease rule, so that it saves the round
// trips the driver saves and no more: from 10 s, a lease is granted a
// second longer than the TTL and reused without renewal for 0.9 s after
// its grant or renewal, while it still holds a whole TTL; shorter TTLs
// renew at each use.
const (
	etcdFloorSpareFrom = 10 // seconds
	etcdFloorReuse     = 900 * time.Millisecond
)

// etcdRevokeTimeout bounds one background revocation.
const etcdRevokeTimeout = 5 * time.Second

func openEtcdFloor(ctx context.Context, t Target) (Client, error) {
	cli, err := dialEtcd(ctx, t)
	if err != nil {
		return nil, err
	}
	f := &etcdFloor{cli: cli, prefix: "/dlockbench-floor", ttl: etcdTTLSeconds(),
		revoke: make(chan clientv3.LeaseID, 4096), done: make(chan struct{})}
	go f.revoker()
	return &retryClient{try: f.tryAcquire, close: f.close}, nil
}

// revoker revokes the leases of failed attempts and, at close, the
// spares, so that the server does not keep idle leases for a TTL.
func (f *etcdFloor) revoker() {
	defer close(f.done)
	for id := range f.revoke {
		f.revokeNow(id)
	}
}

func (f *etcdFloor) revokeNow(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), etcdRevokeTimeout)
	defer cancel()
	_, _ = f.cli.Revoke(ctx, id) // it expires after its TTL otherwise
}

// revokeLater hands a lease to the revoker, or revokes it at once when
// the revoker is that far behind.
func (f *etcdFloor) revokeLater(id clientv3.LeaseID) {
	select {
	case f.revoke <- id:
	default:
		f.revokeNow(id)
	}
}

// leaseSeconds is the etcd lease's TTL, reuse how long after its grant or
// renewal it may be used again without a renewal.
func (f *etcdFloor) leaseSeconds() (secs int64, reuse time.Duration) {
	if f.ttl >= etcdFloorSpareFrom {
		return f.ttl + 1, etcdFloorReuse
	}
	return f.ttl, 0
}

// lease returns a lease that holds a whole TTL from now: a spare reused
// or renewed, or a new grant. A grant is not cancelled by ctx: a grant
// cancelled in flight may be made on the server with its ID never learnt,
// a lease nobody revokes; a ctx that ended meanwhile revokes it.
func (f *etcdFloor) lease(ctx context.Context) (etcdFloorLease, error) {
	secs, reuse := f.leaseSeconds()
	f.mu.Lock()
	var sp etcdFloorLease
	ok := len(f.spares) > 0
	if ok {
		sp = f.spares[len(f.spares)-1]
		f.spares = f.spares[:len(f.spares)-1]
	}
	f.mu.Unlock()
	start := time.Now()
	if ok && start.Sub(sp.renewed) < reuse {
		return sp, nil
	}
	if ok {
		if _, err := f.cli.KeepAliveOnce(ctx, sp.id); err == nil {
			sp.renewed = start
			return sp, nil
		}
		f.revokeLater(sp.id)
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdRevokeTimeout)
	defer cancel()
	g, err := f.cli.Grant(gctx, secs)
	if err != nil {
		return etcdFloorLease{}, err
	}
	if ctx.Err() != nil {
		f.revokeLater(g.ID)
		return etcdFloorLease{}, ctx.Err()
	}
	return etcdFloorLease{id: g.ID, tag: rand.Uint64(), renewed: start}, nil
}

// keep puts back a lease whose key is deleted, for the next use.
func (f *etcdFloor) keep(sp etcdFloorLease) {
	f.mu.Lock()
	f.spares = append(f.spares, sp)
	f.mu.Unlock()
}

// deleted ends a use of sp's key: kept for the next use when the delete
// succeeded, revoked (which deletes the key, if it is there) otherwise.
func (f *etcdFloor) deleted(sp etcdFloorLease, err error) error {
	if err != nil {
		f.revokeLater(sp.id)
		return err
	}
	f.keep(sp)
	return nil
}

func (f *etcdFloor) tryAcquire(ctx context.Context, name string) (Held, bool, error) {
	sp, err := f.lease(ctx)
	if err != nil {
		return nil, false, err
	}
	q := f.prefix + "/" + etcdEscape.Replace(name) + "/"
	key := fmt.Sprintf("%s%016x-%016x", q, int64(sp.id), sp.tag)
	resp, err := f.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(sp.id)), clientv3.OpGet(q, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		f.revokeLater(sp.id) // the key, if it was made, goes with it
		return nil, false, err
	}
	if !resp.Succeeded { // a deleted key's name: it cannot exist
		f.revokeLater(sp.id)
		return nil, false, fmt.Errorf("bench: etcd floor: key %s already exists", key)
	}
	rev := resp.Header.Revision // the key's create revision: made by this transaction
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].CreateRevision != rev {
		_, err := f.cli.Delete(ctx, key)
		return nil, false, f.deleted(sp, err)
	}
	return &etcdFloorHeld{f: f, key: key, lease: sp, token: uint64(rev)}, true, nil
}

// close revokes the spares, waits for the revocations handed to the
// revoker, then closes the client; it may be called again.
func (f *etcdFloor) close() (err error) {
	f.closed.Do(func() {
		f.mu.Lock()
		spares := f.spares
		f.spares = nil
		f.mu.Unlock()
		for _, sp := range spares {
			f.revokeLater(sp.id)
		}
		close(f.revoke)
		<-f.done
		err = f.cli.Close()
	})
	return err
}

// etcdFloorHeld is a lock the floor holds.
type etcdFloorHeld struct {
	f     *etcdFloor
	key   string
	lease etcdFloorLease
	token uint64
}

func (h *etcdFloorHeld) Token() uint64 { return h.token }

// Release deletes the key (its name is its lease grant's: no other
// owner's key has it) and keeps the lease for the next use.
func (h *etcdFloorHeld) Release(ctx context.Context) error {
	_, err := h.f.cli.Delete(ctx, h.key)
	return h.f.deleted(h.lease, err)
}

// openEtcdRTT opens the raw round trip: a linearizable Get.
func openEtcdRTT(ctx context.Context, t Target) (Client, error) {
	cli, err := dialEtcd(ctx, t)
	if err != nil {
		return nil, err
	}
	return &retryClient{
		try: func(ctx context.Context, _ string) (Held, bool, error) {
			_, err := cli.Get(ctx, "/dlockbench-rtt")
			return released, true, err
		},
		close: cli.Close,
	}, nil
}

// etcdMutexClient is the concurrency.Mutex peer: one client and one
// session, made once.
type etcdMutexClient struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func openEtcdMutex(ctx context.Context, t Target) (Client, error) {
	return newEtcdMutex(ctx, t, etcdTTLSeconds())
}

// newEtcdMutex opens the peer with a session of ttl seconds.
func newEtcdMutex(ctx context.Context, t Target, ttl int64) (*etcdMutexClient, error) {
	cli, err := dialEtcd(ctx, t)
	if err != nil {
		return nil, err
	}
	// The session lives as long as the client (its default context), not
	// as long as ctx, which only bounds the connection: a session on ctx
	// would stop its keep-alive when an opener's timeout ends, and its
	// lease, every lock's, would expire under the holders.
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl)))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("bench: %s: session: %w", t.Name, err)
	}
	return &etcdMutexClient{cli: cli, sess: sess}, nil
}

func (c *etcdMutexClient) Acquire(ctx context.Context, name string) (Held, error) {
	m := concurrency.NewMutex(c.sess, "/dlockbench-mutex/"+etcdEscape.Replace(name))
	if err := m.Lock(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return noToken{release: m.Unlock}, nil
}

func (c *etcdMutexClient) FailedAttempts() uint64 { return 0 } // a native queue
func (c *etcdMutexClient) Close() error {
	c.sess.Close() // revokes the session's lease
	return c.cli.Close()
}

// etcdSettings records what changes results on a server the user named
// (a server dlockbench started has them from testenv): its version.
func (s *Server) etcdSettings(ctx context.Context, set func(k, v string)) {
	if _, ok := s.Settings["fsync"]; !ok {
		set("fsync", "unknown (server not started by dlockbench)")
	}
	if s.Settings["version"] != "" {
		return
	}
	cli, err := dialEtcd(ctx, Target{Name: s.ID, URL: s.URL})
	if err != nil {
		set("error", err.Error())
		return
	}
	defer cli.Close()
	if st, err := cli.Status(ctx, cli.Endpoints()[0]); err == nil {
		set("version", st.Version)
	}
}

// EtcdNoFsyncNote labels the targets of the etcd server dlockbench starts
// with --unsafe-no-fsync.
const EtcdNoFsyncNote = "etcd with --unsafe-no-fsync (not etcd's default): a write is acknowledged before it is on disk, " +
	"so a crash of every member may lose acknowledged writes, fencing tokens (revisions) included"

// EtcdFsyncNote labels the dlock target of the etcd server with fsync on.
const EtcdFsyncNote = "etcd, one member, fsync on (etcd's default: every write on disk before it is acknowledged)"
