package headwater

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// brokerPIDs reads HEADWATER_BROKER_PIDS ("id=pid,id=pid"), which tests/interop/test_go_client.py
// sets for this test alone (it runs after the others: it kills a broker).
func brokerPIDs(t *testing.T) map[int32]int {
	t.Helper()
	pids := map[int32]int{}
	for _, kv := range strings.Split(os.Getenv("HEADWATER_BROKER_PIDS"), ",") {
		id, pid, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		i, err1 := strconv.Atoi(id)
		p, err2 := strconv.Atoi(pid)
		if err1 != nil || err2 != nil {
			t.Fatalf("HEADWATER_BROKER_PIDS entry %q", kv)
		}
		pids[int32(i)] = p
	}
	if len(pids) < 2 {
		t.Fatal("HEADWATER_BROKER_PIDS names fewer than 2 brokers: run through tests/interop/test_go_client.py")
	}
	return pids
}

// TestFailoverKillsTheLeaderUnderAProducerAndAConsumer: SIGKILL of a partition's leader while
// an idempotent producer sends to it and a partition consumer reads it: every send succeeds
// (retried on the new leader), the consumer carries on from its position on the new leader,
// and the log holds every record once, in order.
func TestFailoverKillsTheLeaderUnderAProducerAndAConsumer(t *testing.T) {
	pids := brokerPIDs(t)
	_, ctx := dial(t)
	c, err := Dial(ctx, os.Getenv("HEADWATER_BOOTSTRAP"), Options{Retries: 300, RetryBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := fmt.Sprintf("go-failover-%d", time.Now().UnixNano())
	if _, err := c.CreateTopics(ctx, NewTopic{Name: name, Partitions: 1, ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	var leader int32
	for {
		ds, err := c.DescribeTopics(ctx, name)
		if err == nil && ds[0].Partitions[0].Leader >= 0 && len(ds[0].Partitions[0].ISR) == 2 {
			leader = ds[0].Partitions[0].Leader
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never had a leader and 2 in-sync replicas: %v %v", name, ds, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	pid, ok := pids[leader]
	if !ok {
		t.Fatalf("no pid for leader %d in %v", leader, pids)
	}
	pc, err := c.ConsumePartition(ctx, name, 0, OffsetEarliest, ConsumerOptions{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	p := c.NewProducer(ProducerOptions{})
	const total, killAt = 200, 60
	var consumed []Message
	for i := 0; i < total; i++ {
		if i == killAt {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("killing leader %d (pid %d): %v", leader, pid, err)
			}
		}
		meta, err := p.SendTo(ctx, name, 0, Record{Value: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatalf("send %d (leader %d killed at send %d): %v", i, leader, killAt, err)
		}
		if meta[0].Offset < int64(i) {
			t.Fatalf("send %d stored at offset %d", i, meta[0].Offset)
		}
		if i%20 == 0 {
			msgs, err := pc.Poll(ctx)
			if err != nil {
				t.Fatalf("poll after send %d: %v", i, err)
			}
			consumed = append(consumed, msgs...)
		}
	}
	for len(consumed) < total {
		msgs, err := pc.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d of %d: %v", len(consumed), total, err)
		}
		consumed = append(consumed, msgs...)
	}
	for i, m := range consumed {
		if m.Offset != int64(i) || string(m.Value) != strconv.Itoa(i) {
			t.Fatalf("message %d: offset %d value %q", i, m.Offset, m.Value)
		}
	}
	end, err := c.ListOffset(ctx, name, 0, OffsetLatest)
	if err != nil || end != total {
		t.Fatalf("log end %d (%v), want %d: a record stored twice or lost", end, err, total)
	}
	ds, err := c.DescribeTopics(ctx, name)
	if err != nil || ds[0].Partitions[0].Leader == leader {
		t.Fatalf("after the kill: %+v, %v; want a new leader", ds, err)
	}
}
