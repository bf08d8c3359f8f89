package activity

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/internal/testenv"
)

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestFlushKeepsNewestTimestamp(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	clk := testenv.NewClock(time.Unix(1_000_000, 0))
	r := NewRecorder(hclog.NewNullLogger(), rdb)
	r.now = clk.Now

	r.Mark("a")
	clk.Set(time.Unix(1_000_005, 0))
	r.Mark("a")
	r.Mark("b")
	// Another replica already recorded a newer access of b.
	if err := rdb.ZAdd(ctx, Key, redis.Z{Score: 2_000_000, Member: "b"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.ZRangeWithScores(ctx, Key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"a": 1_000_005, "b": 2_000_000}
	if len(got) != len(want) {
		t.Fatalf("zset %v, want %v", got, want)
	}
	for _, z := range got {
		if want[z.Member.(string)] != z.Score {
			t.Fatalf("zset %v, want %v", got, want)
		}
	}

	// Nothing new: a flush writes nothing (the TTL runner may have removed
	// the entries meanwhile, and they must not come back).
	if err := rdb.Del(ctx, Key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, Key).Result(); n != 0 {
		t.Fatal("a flush without new marks wrote the zset")
	}
	clk.Set(time.Unix(1_000_009, 0))
	r.Mark("a")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := rdb.ZScore(ctx, Key, "a").Result(); err != nil || s != 1_000_009 {
		t.Fatalf("score of a = %v, %v", s, err)
	}
}

func TestForgetsIdleEntries(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(time.Unix(1_000_000, 0))
	r := NewRecorder(hclog.NewNullLogger(), newRedis(t))
	r.now = clk.Now
	r.Mark("old")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Set(clk.Now().Add(forgetAfter + time.Second))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.entries.Load("old"); ok {
		t.Fatal("idle entry kept in memory")
	}
}

func TestRunFlushesOnStop(t *testing.T) {
	rdb := newRedis(t)
	r := NewRecorder(hclog.NewNullLogger(), rdb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.run(ctx, time.Hour) }()
	r.Mark("w")
	cancel()
	<-done
	if _, err := rdb.ZScore(context.Background(), Key, "w").Result(); err != nil {
		t.Fatalf("mark not flushed on stop: %v", err)
	}
}

func TestConcurrentMarks(t *testing.T) {
	r := NewRecorder(hclog.NewNullLogger(), newRedis(t))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				r.Mark("w")
			}
		}()
	}
	wg.Wait()
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}
