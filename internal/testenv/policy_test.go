package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recordTB records what the skip/fail policy did instead of doing it.
type recordTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordTB) Helper()                           {}
func (r *recordTB) Skipf(f string, args ...any)       { r.skipped = fmt.Sprintf(f, args...) }
func (r *recordTB) Fatalf(f string, args ...any)      { r.failed = fmt.Sprintf(f, args...) }
func (r *recordTB) Fatal(args ...any)                 { r.failed = fmt.Sprint(args...) }
func (r *recordTB) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...) }
func (r *recordTB) Cleanup(func())                    {}
func (r *recordTB) Logf(format string, args ...any)   {}
func (r *recordTB) Errorf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// TestRequirePolicy: a missing server binary skips with a message naming
// the install script, and fails instead under DLOCK_REQUIRE_BACKENDS=1.
func TestRequirePolicy(t *testing.T) {
	t.Setenv(EnvRedisURL, "")
	t.Setenv(EnvTestEnvDocker, "")
	t.Setenv("DLOCK_REDIS_SERVER", "/nonexistent/redis-server")

	t.Setenv(EnvRequire, "")
	r := &recordTB{TB: t}
	Require(r, KindRedis)
	if r.failed != "" || !strings.Contains(r.skipped, "scripts/install-backends.sh") {
		t.Errorf("without %s: skipped %q, failed %q; want a skip naming the install script", EnvRequire, r.skipped, r.failed)
	}

	t.Setenv(EnvRequire, "1")
	r = &recordTB{TB: t}
	Require(r, KindRedis)
	if r.skipped != "" || !strings.Contains(r.failed, "scripts/install-backends.sh") {
		t.Errorf("with %s=1: skipped %q, failed %q; want a failure", EnvRequire, r.skipped, r.failed)
	}

	// An external server needs no binary.
	t.Setenv(EnvRedisURL, "redis://127.0.0.1:1/0")
	r = &recordTB{TB: t}
	Require(r, KindRedis)
	if r.skipped != "" || r.failed != "" {
		t.Errorf("with %s set: skipped %q, failed %q", EnvRedisURL, r.skipped, r.failed)
	}
	if s := Redis(r); !s.External() || s.URL != "redis://127.0.0.1:1/0" || s.Addr != "127.0.0.1:1" {
		t.Errorf("Redis with %s = %+v", EnvRedisURL, s)
	}
}
