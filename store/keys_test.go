package store_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/codehub-io/codehub/store"
)

func TestDeploymentKeySharedAndStable(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	// Replicas asking at the same time on an empty table get one key.
	keys := make([][]byte, 8)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], errs[i] = store.DeploymentKey(ctx, pool, "test-shared")
		}()
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if len(keys[i]) != 32 || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("replica %d got key %x, replica 0 %x", i, keys[i], keys[0])
		}
	}
	again, err := store.DeploymentKey(ctx, pool, "test-shared")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, keys[0]) {
		t.Fatal("the key changed on a later read")
	}
	other, err := store.DeploymentKey(ctx, pool, "test-other")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other, keys[0]) {
		t.Fatal("two names share one key")
	}
}
