package testenv

import (
	"os"
	"path/filepath"
	"regexp"
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
		"etcd":        {"quay.io/coreos/etcd:v3.4", "127.0.0.1:2379:2379"},
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

// TestComposeServesREADME checks that every server address in the README's
// URL table ("Pointing it at a real server") is served by a service of
// docker-compose.yml: published on that loopback port, or listening on it
// in the host's network (--port N). The README says compose starts them all.
func TestComposeServesREADME(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Ports       []string `yaml:"ports"`
			NetworkMode string   `yaml:"network_mode"`
			Command     []string `yaml:"command"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	served := map[string]string{} // "127.0.0.1:port" → service
	for name, s := range f.Services {
		for _, p := range s.Ports {
			if parts := strings.Split(p, ":"); len(parts) == 3 {
				served[parts[0]+":"+parts[1]] = name
			}
		}
		if s.NetworkMode == "host" {
			for i, a := range s.Command {
				if a == "--port" && i+1 < len(s.Command) {
					served["127.0.0.1:"+s.Command[i+1]] = name
					if len(s.Healthcheck.Test) < 2 {
						t.Errorf("%s: no healthcheck", name)
					}
				}
			}
		}
	}
	// The table's rows: | backend | `import` | `URL`, `URL` … |
	sec := string(readme)
	i := strings.Index(sec, "## Pointing it at a real server")
	if i < 0 {
		t.Fatal("README.md: no section \"Pointing it at a real server\"")
	}
	sec = sec[i:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	addr := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	n := 0
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.Contains(line, "mem://") {
			continue
		}
		for _, a := range addr.FindAllString(line, -1) {
			n++
			if served[a] == "" {
				t.Errorf("README's URL table names %s (%s), which no service of docker-compose.yml serves", a, strings.TrimSpace(strings.Split(line, "|")[1]))
			}
		}
	}
	if n < 8 {
		t.Fatalf("found %d addresses in the README's URL table, want the table's 8 or more", n)
	}
}
