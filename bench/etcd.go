package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	"etcd-floor": "grant an etcd lease of the TTL; one transaction: put-if-absent (create revision 0) of " +
		"<queue>/<lease id> under that lease, and a read of the queue's lowest create revision (held when it is " +
		"the key's own; the fencing token is that create revision, durable before it is returned); delete the key " +
		"(the lease is revoked off the path, in the background): 3 round trips",
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
	ttl    int64
	// revoke takes the leases to revoke off the acquire/release path.
	revoke chan clientv3.LeaseID
	done   chan struct{}
	closed sync.Once
}

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

// revoker revokes the leases of released (or failed) attempts, so that
// the server does not keep thousands of idle leases for a TTL.
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

// grant grants a lease of the floor's TTL. It is not cancelled by ctx:
// a grant cancelled in flight may be made on the server with its ID never
// learnt, a lease nobody revokes. A ctx that ended meanwhile revokes it
// and returns ctx's error.
func (f *etcdFloor) grant(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdRevokeTimeout)
	defer cancel()
	g, err := f.cli.Grant(gctx, f.ttl)
	if err == nil && ctx.Err() != nil {
		f.revokeLater(g.ID)
		return nil, ctx.Err()
	}
	return g, err
}

func (f *etcdFloor) tryAcquire(ctx context.Context, name string) (Held, bool, error) {
	g, err := f.grant(ctx)
	if err != nil {
		return nil, false, err
	}
	q := f.prefix + "/" + etcdEscape.Replace(name) + "/"
	key := fmt.Sprintf("%s%016x", q, int64(g.ID))
	resp, err := f.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(g.ID)), clientv3.OpGet(q, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		f.revokeLater(g.ID) // the key, if it was made, goes with it
		return nil, false, err
	}
	if !resp.Succeeded { // a fresh lease's key cannot exist
		f.revokeLater(g.ID)
		return nil, false, fmt.Errorf("bench: etcd floor: key %s already exists", key)
	}
	rev := resp.Header.Revision // the key's create revision: made by this transaction
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].CreateRevision != rev {
		_, err := f.cli.Delete(ctx, key)
		f.revokeLater(g.ID)
		return nil, false, err
	}
	return &etcdFloorHeld{f: f, key: key, lease: g.ID, token: uint64(rev)}, true, nil
}

// close waits for the revocations handed to the revoker, then closes the
// client; it may be called again.
func (f *etcdFloor) close() (err error) {
	f.closed.Do(func() {
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
	lease clientv3.LeaseID
	token uint64
}

func (h *etcdFloorHeld) Token() uint64 { return h.token }

// Release deletes the key (its name is its lease's: no other owner's key
// has it) and revokes the lease off the path.
func (h *etcdFloorHeld) Release(ctx context.Context) error {
	_, err := h.f.cli.Delete(ctx, h.key)
	h.f.revokeLater(h.lease)
	return err
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
