package headwater

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// These tests need a running cluster: HEADWATER_BOOTSTRAP=host:port of a broker.
// tests/clients/test_go_client.py starts one and runs `go test` with it (part of `make test`).

// RecordsTopic is produced by TestProduceAndConsumeByPartition; the Python side of
// tests/clients/test_go_client.py reads it afterwards.
const RecordsTopic = "go-client-records"

func dial(t *testing.T) (*Client, context.Context) {
	t.Helper()
	bootstrap := os.Getenv("HEADWATER_BOOTSTRAP")
	if bootstrap == "" {
		t.Fatal("HEADWATER_BOOTSTRAP is not set: run through tests/clients/test_go_client.py")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	c, err := Dial(ctx, bootstrap, Options{ClientID: "go-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ctx
}

// createTopic creates a topic and waits (bounded by ctx) until every partition has a leader.
func createTopic(t *testing.T, ctx context.Context, c *Client, name string, partitions int32) TopicDescription {
	t.Helper()
	ids, err := c.CreateTopics(ctx, NewTopic{Name: name, Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	if ids[name] == "" {
		t.Fatalf("no topic id for %s: %v", name, ids)
	}
	for {
		ds, err := c.DescribeTopics(ctx, name)
		if err == nil && len(ds[0].Partitions) == int(partitions) && allLed(ds[0]) {
			return ds[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: partitions without a leader until the deadline (last: %v, %v)", name, ds, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allLed(d TopicDescription) bool {
	for _, p := range d.Partitions {
		if p.Leader < 0 {
			return false
		}
	}
	return true
}

func TestAdminCreatesListsAndDescribesTopics(t *testing.T) {
	c, ctx := dial(t)
	name := fmt.Sprintf("go-admin-%d", time.Now().UnixNano())
	d := createTopic(t, ctx, c, name, 3)
	if d.TopicID == "" || len(d.Partitions) != 3 {
		t.Fatalf("described %+v", d)
	}
	for i, p := range d.Partitions {
		if p.Partition != int32(i) || len(p.Replicas) == 0 || len(p.ISR) == 0 {
			t.Errorf("partition %d described as %+v", i, p)
		}
	}
	names, err := c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range names {
		found = found || n == name
	}
	if !found {
		t.Fatalf("ListTopics %v lacks %s", names, name)
	}
	// typed errors: the same name again, and an unknown topic
	_, err = c.CreateTopics(ctx, NewTopic{Name: name})
	if !IsCode(err, pb.ErrorCode_TOPIC_ALREADY_EXISTS) {
		t.Fatalf("creating %s twice: %v, want TOPIC_ALREADY_EXISTS", name, err)
	}
	_, err = c.DescribeTopics(ctx, name+"-missing")
	if !IsCode(err, pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Fatalf("describing a missing topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}

// consumeAll reads topic/partition from the start until it has want messages (bounded by ctx).
func consumeAll(t *testing.T, ctx context.Context, c *Client, topic string, partition int32, want int) []Message {
	t.Helper()
	pc, err := c.ConsumePartition(ctx, topic, partition, OffsetEarliest, ConsumerOptions{MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got []Message
	for len(got) < want {
		msgs, err := pc.Poll(ctx)
		if err != nil {
			t.Fatalf("%s-%d after %d of %d messages: %v", topic, partition, len(got), want, err)
		}
		got = append(got, msgs...)
	}
	return got
}

func TestProduceAndConsumeByPartition(t *testing.T) {
	c, ctx := dial(t)
	const partitions, keys, perKey = 3, 12, 5
	createTopic(t, ctx, c, RecordsTopic, partitions)
	p := c.NewProducer(ProducerOptions{Compression: "zstd"})
	ts := time.UnixMilli(1_700_000_000_000)
	var sent []Record
	for round := 0; round < perKey; round++ {
		for k := 0; k < keys; k++ {
			sent = append(sent, Record{
				Key:       []byte(fmt.Sprintf("key-%d", k)),
				Value:     []byte(fmt.Sprintf("value-%d-%d", k, round)),
				Headers:   []Header{{Key: "round", Value: []byte{byte(round)}}, {Key: "null"}},
				Timestamp: ts,
			})
		}
	}
	// two sends: the second continues each partition's sequence
	half := len(sent) / 2
	meta1, err := p.Send(ctx, RecordsTopic, sent[:half]...)
	if err != nil {
		t.Fatal(err)
	}
	meta2, err := p.Send(ctx, RecordsTopic, sent[half:]...)
	if err != nil {
		t.Fatal(err)
	}
	meta := append(meta1, meta2...)
	perPartition := map[int32]int{}
	for i, m := range meta {
		if want := int32(Partition(sent[i].Key, partitions)); m.Partition != want {
			t.Fatalf("record %d (key %s) went to %d, the partitioner says %d", i, sent[i].Key, m.Partition, want)
		}
		perPartition[m.Partition]++
	}
	for partition := int32(0); partition < partitions; partition++ {
		got := consumeAll(t, ctx, c, RecordsTopic, partition, perPartition[partition])
		if len(got) != perPartition[partition] {
			t.Fatalf("partition %d: %d messages, want %d", partition, len(got), perPartition[partition])
		}
		var want []Record
		for i, m := range meta {
			if m.Partition == partition {
				want = append(want, sent[i])
				if got[len(want)-1].Offset != m.Offset {
					t.Errorf("partition %d: message %d at offset %d, Send said %d", partition, len(want)-1, got[len(want)-1].Offset, m.Offset)
				}
			}
		}
		for i, m := range got {
			w := want[i]
			if m.Offset != int64(i) || !bytes.Equal(m.Key, w.Key) || !bytes.Equal(m.Value, w.Value) ||
				!m.Timestamp.Equal(ts) || len(m.Headers) != 2 || m.Headers[1].Value != nil ||
				!bytes.Equal(m.Headers[0].Value, w.Headers[0].Value) {
				t.Fatalf("partition %d message %d: %+v, want %+v at offset %d", partition, i, m, w, i)
			}
		}
	}
	// null keys and values: round-robin placement, null kept as null
	nulls, err := p.Send(ctx, RecordsTopic, Record{Value: []byte("no key")}, Record{Key: []byte("tombstone")})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range nulls {
		pc, err := c.ConsumePartition(ctx, RecordsTopic, m.Partition, m.Offset, ConsumerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := pc.Poll(ctx)
		pc.Close()
		if err != nil || len(msgs) == 0 || msgs[0].Offset != m.Offset {
			t.Fatalf("reading back %+v: %v %+v", m, err, msgs)
		}
		if (msgs[0].Key == nil) == (msgs[0].Value == nil) {
			t.Fatalf("null key or null value not kept: %+v", msgs[0])
		}
	}
}

func TestRetriedProduceIsStoredOnce(t *testing.T) {
	c, ctx := dial(t)
	name := fmt.Sprintf("go-idem-%d", time.Now().UnixNano())
	createTopic(t, ctx, c, name, 1)
	p := c.NewProducer(ProducerOptions{})
	first, err := p.SendTo(ctx, name, 0, Record{Value: []byte("a")}, Record{Value: []byte("b")})
	if err != nil {
		t.Fatal(err)
	}
	ident, err := p.identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// the request of the first send again, as a retry after a lost answer would send it
	retry := p.request(name, 0, []Record{{Value: []byte("a")}, {Value: []byte("b")}}, ident, 0)
	base, err := p.produce(ctx, retry)
	if err != nil || base != first[0].Offset {
		t.Fatalf("retry answered offset %d, %v; the original was %d", base, err, first[0].Offset)
	}
	next, err := p.SendTo(ctx, name, 0, Record{Value: []byte("c")})
	if err != nil || next[0].Offset != 2 {
		t.Fatalf("the next send: %+v, %v; want offset 2", next, err)
	}
	// a sequence gap is refused with the typed error and stores nothing
	gap := p.request(name, 0, []Record{{Value: []byte("x")}}, ident, 7)
	if _, err := p.produce(ctx, gap); !IsCode(err, pb.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER) {
		t.Fatalf("a sequence gap: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", err)
	}
	got := consumeAll(t, ctx, c, name, 0, 3)
	end, err := c.ListOffset(ctx, name, 0, OffsetLatest)
	if err != nil || end != 3 {
		t.Fatalf("log end %d (%v), want 3", end, err)
	}
	for i, want := range []string{"a", "b", "c"} {
		if string(got[i].Value) != want {
			t.Fatalf("message %d is %q, want %q", i, got[i].Value, want)
		}
	}
}

func TestUnknownTopicIsATypedError(t *testing.T) {
	c, ctx := dial(t)
	_, err := c.NewProducer(ProducerOptions{}).Send(ctx, "go-no-such-topic", Record{Value: []byte("x")})
	if !IsCode(err, pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Fatalf("producing to a missing topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}

func TestPollEndsWithItsContextAndResumes(t *testing.T) {
	c, ctx := dial(t)
	name := fmt.Sprintf("go-poll-%d", time.Now().UnixNano())
	createTopic(t, ctx, c, name, 1)
	pc, err := c.ConsumePartition(ctx, name, 0, OffsetLatest, ConsumerOptions{MaxWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	// nothing to read: the long poll would last 20 s, the call's context ends it first
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	msgs, err := pc.Poll(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || len(msgs) != 0 {
		t.Fatalf("Poll under an ended context: %v, %d messages; want DeadlineExceeded", err, len(msgs))
	}
	if _, err := c.NewProducer(ProducerOptions{}).SendTo(ctx, name, 0, Record{Value: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	// the next Poll opens a new stream at the same position and gets the record
	for len(msgs) == 0 {
		if msgs, err = pc.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if msgs[0].Offset != 0 || string(msgs[0].Value) != "after" || pc.Position() != 1 {
		t.Fatalf("after resuming: %+v, position %d", msgs, pc.Position())
	}
}
