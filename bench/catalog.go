package bench

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/dlock-go/dlock"
)

// strategies lists, per server family, the dlock URLs' strategy
// parameter and the target name suffix of each strategy, and the floor
// that strategy is compared with (floorImpls, floors.go): the fenced one,
// which gives the strategy's guarantees, its fencing token included.
type strategy struct {
	suffix string // "" for the default strategy
	param  string // query to add to the server URL
	floor  string // Impl of the floor
}

var strategies = map[string][]strategy{
	"redis":     {{"", "", "redis-floor"}},
	"zookeeper": {{"", "", "zk-floor"}, {"/basic", "recipe=basic", "zk-floor"}},
	"postgres": {
		{"/forupdate", "strategy=forupdate", "pg-forupdate-floor"},
		{"/version", "strategy=version", "pg-version-floor"},
		{"/advisory", "strategy=advisory", "pg-advisory-floor"},
	},
	"mysql": {
		{"/forupdate", "strategy=forupdate", "mysql-forupdate-floor"},
		{"/version", "strategy=version", "mysql-version-floor"},
		{"/getlock", "strategy=getlock", "mysql-getlock-floor"},
	},
	"etcd": {{"", "", "etcd-floor"}},
}

var rttImpl = map[string]string{"redis": "redis-rtt", "zookeeper": "zk-rtt", "postgres": "pg-rtt", "mysql": "mysql-rtt", "etcd": "etcd-rtt"}

// peerImpls are the peers of a server family, in the order of their rows.
var peerImpls = map[string][]string{
	"redis":     {"redsync", "redsync tuned", "redislock", "redislock tuned"},
	"zookeeper": {"zk.Lock"},
	"etcd":      {"etcd Mutex"},
}

// peerFloor is the floor the peers of a family are built on and compared
// with: the unfenced one (redsync and redislock: SET NX PX and a
// compare-and-delete; zk.Lock: an ephemeral node), while dlock's rows are
// compared with the fenced floor of their strategy, which also issues
// dlock's token. Its target is "floor <server> unfenced". etcd's
// concurrency.Mutex is built on the same transaction as the etcd floor
// (put-if-absent under a lease, reading the queue's lowest create
// revision), which gives its create revision whether or not the caller
// uses it: it is compared with that floor, the one dlock's row has.
var peerFloor = map[string]string{"redis": "redis-unfenced-floor", "zookeeper": "zk-unfenced-floor", "etcd": "etcd-floor"}

// FamilyOf returns the server family of a dlock URL scheme.
func FamilyOf(rawURL string) string {
	scheme, _, _ := strings.Cut(rawURL, "://")
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "redlock", "redis+cluster":
		return "redis"
	case "zk":
		return "zookeeper"
	case "postgres", "postgresql":
		return "postgres"
	case "mysql":
		return "mysql"
	case "mem":
		return "memory"
	case "etcd", "etcds":
		return "etcd"
	}
	return scheme
}

// ServerURL strips a dlock URL down to what the hand-written clients need
// (the driver's own query parameters removed, except PostgreSQL's
// connection settings).
func ServerURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	keep := url.Values{}
	if FamilyOf(rawURL) == "postgres" {
		for _, k := range []string{"sslmode", "connect_timeout", "application_name"} {
			if v, ok := q[k]; ok {
				keep[k] = v
			}
		}
	}
	u.RawQuery = keep.Encode()
	if f := FamilyOf(rawURL); f == "zookeeper" || f == "etcd" {
		u.Path = ""
	}
	return u.String()
}

// withQuery adds a query parameter to a URL.
func withQuery(raw, param string) string {
	if param == "" {
		return raw
	}
	if strings.Contains(raw, "?") {
		return raw + "&" + param
	}
	return raw + "?" + param
}

// TargetsFor returns the targets of a server dlockbench started: every
// dlock strategy whose driver is registered, the floors (the fenced floor
// of each strategy, and the unfenced one the peers are built on), the raw
// round trip and the peers. Targets whose driver is missing are returned
// in skipped with the reason.
func TargetsFor(s *Server) (targets []Target, skipped map[string]string) {
	skipped = map[string]string{}
	fam := s.Backend
	rtt := Target{Name: "rtt " + s.ID, Kind: KindRTT, Impl: rttImpl[fam], URL: ServerURL(s.URL), Backend: fam, Server: s.ID}
	var floors []Target
	// floorOf returns the name of the floor target of impl, adding it
	// under name when it is new.
	floorOf := func(impl, name string) string {
		if _, ok := openers[impl]; !ok {
			return ""
		}
		for _, f := range floors {
			if f.Impl == impl {
				return f.Name
			}
		}
		floors = append(floors, Target{Name: name, Kind: KindFloor, Impl: impl, URL: rtt.URL, Backend: fam,
			Server: s.ID, RTT: rtt.Name, Note: floorNote(impl)})
		return name
	}
	for _, st := range strategies[fam] {
		t := Target{Name: s.ID + st.suffix, Kind: KindDlock, URL: withQuery(s.URL, st.param), Backend: fam, Server: s.ID, RTT: rtt.Name}
		t.Floor = floorOf(st.floor, "floor "+s.ID+st.suffix)
		if fam == "etcd" {
			t.Note = strings.TrimPrefix(EtcdTTLNote(), "; ")
		}
		if !Registered(t.URL) {
			skipped[t.Name] = fmt.Sprintf("driver for %s:// not built into this binary yet", scheme(t.URL))
			continue
		}
		targets = append(targets, t)
	}
	if impls := peerImpls[fam]; len(impls) > 0 {
		floor := floorOf(peerFloor[fam], "floor "+s.ID+" unfenced")
		for _, impl := range impls {
			targets = append(targets, Target{Name: impl, Kind: KindPeer, Impl: impl, URL: rtt.URL, Backend: fam,
				Server: s.ID, RTT: rtt.Name, Floor: floor, Note: PeerNotes[impl]})
		}
	}
	targets = append(targets, floors...)
	if rtt.Impl != "" {
		targets = append(targets, rtt)
	}
	return targets, skipped
}

// TargetsForURL returns the targets for a URL the user named with -url:
// that URL as a dlock target, plus its server's floors, round trip and
// peers (as TargetsFor).
func TargetsForURL(s *Server, rawURL string) []Target {
	fam := FamilyOf(rawURL)
	if fam == "memory" {
		t := MemoryTarget()
		// A bare mem:// is a private namespace per Open: the clients would
		// not share a lock. Give them one.
		if u, err := url.Parse(rawURL); err == nil && u.Host != "" {
			t.URL = rawURL
		}
		return []Target{t}
	}
	all, _ := TargetsFor(s)
	variant := ""
	if u, err := url.Parse(rawURL); err == nil {
		variant = u.Query().Get("strategy") + u.Query().Get("recipe")
	}
	t := Target{Name: s.ID, Kind: KindDlock, URL: rawURL, Backend: fam, Server: s.ID, RTT: "rtt " + s.ID}
	if variant != "" {
		t.Name += "/" + variant
	}
	if sch := scheme(rawURL); sch == "redlock" || sch == "redis+cluster" || sch == "rediss" {
		t.Name = sch
	}
	for _, st := range strategies[fam] {
		if st.suffix == "/"+variant || (variant == "" && st.suffix == "") {
			for _, f := range all {
				if f.Impl == st.floor {
					t.Floor = f.Name
				}
			}
		}
	}
	out := []Target{t}
	for _, o := range all {
		if o.Kind != KindDlock {
			out = append(out, o)
		}
	}
	return out
}

func scheme(raw string) string {
	s, _, _ := strings.Cut(raw, "://")
	return strings.ToLower(s)
}

// Registered reports whether the driver of a URL scheme is built in.
func Registered(raw string) bool { return slices.Contains(dlock.Schemes(), scheme(raw)) }

// MemoryTarget is the in-process reference backend.
func MemoryTarget() Target {
	return Target{Name: "memory", Kind: KindDlock, URL: "mem://dlockbench", Backend: "memory", InProcessOnly: true,
		Note: "in-process reference driver: the cost of the portable layer alone"}
}
