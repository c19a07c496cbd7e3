package faults

// The drivers the suite runs against. Client processes are this binary
// re-executed, so linking faults links every driver.
import (
	_ "github.com/dlock-go/dlock/etcd"
	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"
	_ "github.com/dlock-go/dlock/redis"
	_ "github.com/dlock-go/dlock/zookeeper"
)
