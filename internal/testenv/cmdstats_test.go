package testenv

import "testing"

func TestRedisCommandCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_set:calls=10,usec=5,usec_per_call=0.5\r\n" +
		"cmdstat_evalsha:calls=7,usec=9\r\ncmdstat_info:calls=99,usec=1\r\n"
	calls, err := RedisCommandCalls(info)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || calls["set"] != 10 || calls["evalsha"] != 7 || calls["info"] != 99 {
		t.Errorf("RedisCommandCalls = %v", calls)
	}
	for _, bad := range []string{"cmdstat_set", "cmdstat_set:usec=5", "cmdstat_set:calls=x,usec=5"} {
		if _, err := RedisCommandCalls(bad); err == nil {
			t.Errorf("RedisCommandCalls(%q): no error", bad)
		}
	}
}
