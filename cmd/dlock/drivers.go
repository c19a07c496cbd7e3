package main

// The backends dlock can use: each registers its URL schemes.
import (
	_ "github.com/dlock-go/dlock/etcd"
	_ "github.com/dlock-go/dlock/memory"
	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"
	_ "github.com/dlock-go/dlock/redis"
	_ "github.com/dlock-go/dlock/zookeeper"
)
