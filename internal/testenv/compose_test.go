package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestComposeFile checks that the repository's docker-compose.yml parses
// and offers the servers the tests know, each with a healthcheck, on the
// documented loopback ports, with the fixed SQL credentials.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	want := map[string]struct{ image, port string }{
		"redis":       {"redis:", "127.0.0.1:6379:6379"},
		"redis-node1": {"redis:", "127.0.0.1:6380:6379"},
		"redis-node2": {"redis:", "127.0.0.1:6381:6379"},
		"redis-node3": {"redis:", "127.0.0.1:6382:6379"},
		"zookeeper":   {"zookeeper:", "127.0.0.1:2181:2181"},
		"postgres":    {"postgres:", "127.0.0.1:5432:5432"},
		"mysql":       {"mysql:8", "127.0.0.1:3306:3306"},
	}
	for name, w := range want {
		s, ok := f.Services[name]
		if !ok {
			t.Errorf("service %q missing", name)
			continue
		}
		if !strings.HasPrefix(s.Image, w.image) {
			t.Errorf("%s: image %q, want %s*", name, s.Image, w.image)
		}
		if len(s.Ports) != 1 || s.Ports[0] != w.port {
			t.Errorf("%s: ports %q, want [%s]", name, s.Ports, w.port)
		}
		if len(s.Healthcheck.Test) < 2 {
			t.Errorf("%s: no healthcheck", name)
		}
	}
	for _, name := range []string{"postgres", "mysql"} {
		e := f.Services[name].Environment
		user, pw, db := e["POSTGRES_USER"]+e["MYSQL_USER"], e["POSTGRES_PASSWORD"]+e["MYSQL_PASSWORD"], e["POSTGRES_DB"]+e["MYSQL_DATABASE"]
		if user != User || pw != Password || db != Database {
			t.Errorf("%s: user/password/database = %s/%s/%s, want %s/%s/%s", name, user, pw, db, User, Password, Database)
		}
	}
}
