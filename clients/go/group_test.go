package headwater

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// seen collects what members of a group consumed: partition/offset -> the members that got it.
type seen struct {
	mu   sync.Mutex
	by   map[TopicPartition]map[int64][]string
	all  int
	want int
	done chan struct{} // closed when all reaches want
}

func newSeen(want int) *seen {
	return &seen{by: map[TopicPartition]map[int64][]string{}, want: want, done: make(chan struct{})}
}

func (s *seen) add(member string, msgs []Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		tp := TopicPartition{m.Topic, m.Partition}
		if s.by[tp] == nil {
			s.by[tp] = map[int64][]string{}
		}
		if len(s.by[tp][m.Offset]) == 0 {
			s.all++
		}
		s.by[tp][m.Offset] = append(s.by[tp][m.Offset], member)
		if s.all == s.want {
			close(s.done)
		}
	}
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all
}

// consumeInto polls gc into s (committing after each Poll) until ctx ends; the error is nil
// when ctx ended it.
func consumeInto(ctx context.Context, gc *GroupConsumer, name string, s *seen) error {
	for {
		msgs, err := gc.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.add(name, msgs)
		if err := gc.Commit(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("%s: commit: %w", name, err)
		}
	}
}

// split waits until a and b hold disjoint assignments of one generation covering n partitions.
func split(t *testing.T, ctx context.Context, a, b *GroupConsumer, n int) (Assignment, Assignment) {
	t.Helper()
	for {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		aa, _ := a.WaitAssignment(wctx, func(x Assignment) bool { return len(x.Partitions) > 0 })
		ab, _ := b.WaitAssignment(wctx, func(x Assignment) bool { return len(x.Partitions) > 0 })
		cancel()
		if aa.Generation > 0 && aa.Generation == ab.Generation && len(aa.Partitions)+len(ab.Partitions) == n {
			union := map[TopicPartition]bool{}
			for _, tp := range append(append([]TopicPartition{}, aa.Partitions...), ab.Partitions...) {
				union[tp] = true
			}
			if len(union) == n {
				return aa, ab
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no split of %d partitions between the members: %+v and %+v", n, aa, ab)
		}
	}
}

func TestGroupMembersSplitPartitionsAndTheSurvivorResumesFromCommits(t *testing.T) {
	c, ctx := dial(t)
	const partitions, first, second = 4, 200, 40
	topic := fmt.Sprintf("go-group-%d", time.Now().UnixNano())
	group := topic + "-g"
	createTopic(t, ctx, c, topic, partitions)
	opts := GroupOptions{Earliest: true, SessionTimeout: 6 * time.Second, MaxOutstandingRecords: 50}
	opts.MemberID = "go-a"
	a, err := c.ConsumeGroup(ctx, group, []string{topic}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	opts.MemberID = "go-b"
	b, err := c.ConsumeGroup(ctx, group, []string{topic}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	aa, ab := split(t, ctx, a, b, partitions)
	if len(aa.Partitions) != partitions/2 || len(ab.Partitions) != partitions/2 || a.MemberID() != "go-a" {
		t.Fatalf("uneven split or wrong member id: %+v %+v %q", aa, ab, a.MemberID())
	}

	p := c.NewProducer(ProducerOptions{})
	var batch []Record
	for i := 0; i < first; i++ {
		batch = append(batch, Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	meta, err := p.Send(ctx, topic, batch...)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[TopicPartition]int64{}
	for _, m := range meta {
		tp := TopicPartition{m.Topic, m.Partition}
		ends[tp] = max(ends[tp], m.Offset+1)
	}

	// both members consume at once until every record was seen
	s := newSeen(first)
	cctx, stop := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() { errs <- consumeInto(cctx, a, "go-a", s) }()
	go func() { errs <- consumeInto(cctx, b, "go-b", s) }()
	select {
	case <-s.done:
	case <-ctx.Done():
	case err := <-errs:
		t.Fatal(err)
	}
	stop()
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s.count() != first {
		t.Fatalf("the members saw %d of %d records", s.count(), first)
	}
	owner := map[TopicPartition]string{}
	for _, tp := range aa.Partitions {
		owner[tp] = "go-a"
	}
	for _, tp := range ab.Partitions {
		owner[tp] = "go-b"
	}
	for tp, offsets := range s.by {
		if int64(len(offsets)) != ends[tp] {
			t.Errorf("%v: %d offsets seen, the log has %d", tp, len(offsets), ends[tp])
		}
		for o, members := range offsets {
			if len(members) != 1 || members[0] != owner[tp] {
				t.Errorf("%v offset %d went to %v; its owner is %s", tp, o, members, owner[tp])
			}
		}
	}

	// a commits one of its partitions 3 records back, then leaves: b takes a's partitions and
	// resumes each at a's commit (the 3 records again, and what is produced from now on)
	rewound := aa.Partitions[0]
	if err := a.CommitOffsets(ctx, map[TopicPartition]int64{rewound: ends[rewound] - 3}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Poll(ctx); !errors.Is(err, ErrGroupConsumerClosed) {
		t.Fatalf("Poll after Close: %v", err)
	}
	all, err := b.WaitAssignment(ctx, func(x Assignment) bool { return len(x.Partitions) == partitions })
	if err != nil {
		t.Fatalf("b never got every partition: %v (last %+v)", err, all)
	}
	batch = batch[:0]
	for i := 0; i < second; i++ {
		batch = append(batch, Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("w%d", i))})
	}
	if _, err := p.Send(ctx, topic, batch...); err != nil {
		t.Fatal(err)
	}
	after := newSeen(second + 3)
	for after.count() < second+3 {
		msgs, err := b.Poll(ctx)
		if err != nil {
			t.Fatalf("b after %d records: %v", after.count(), err)
		}
		after.add("go-b", msgs)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for tp, offsets := range after.by {
		for o := range offsets {
			if o < ends[tp] && !(tp == rewound && o >= ends[tp]-3) {
				t.Errorf("%v offset %d delivered again, though committed", tp, o)
			}
		}
	}
	for o := ends[rewound] - 3; o < ends[rewound]; o++ {
		if len(after.by[rewound][o]) != 1 {
			t.Errorf("%v offset %d (after a's commit) not delivered to b once: %v", rewound, o, after.by[rewound][o])
		}
	}
	if after.count() != second+3 {
		t.Fatalf("b saw %d records after the rebalance, want %d", after.count(), second+3)
	}
}

func TestGroupMemberThatStopsPollingLosesItsPartitions(t *testing.T) {
	c, ctx := dial(t)
	topic := fmt.Sprintf("go-group-idle-%d", time.Now().UnixNano())
	createTopic(t, ctx, c, topic, 2)
	opts := GroupOptions{SessionTimeout: 3 * time.Second}
	opts.MemberID = "idle"
	idle, err := c.ConsumeGroup(ctx, topic, []string{topic}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	opts.MemberID = "busy"
	busy, err := c.ConsumeGroup(ctx, topic, []string{topic}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	split(t, ctx, idle, busy, 2)
	// idle never polls again: its keep-alives stop after a session timeout, then the server
	// drops it and busy gets both partitions
	got, err := busy.WaitAssignment(ctx, func(x Assignment) bool { return len(x.Partitions) == 2 })
	if err != nil {
		t.Fatalf("busy never got both partitions: %v (last %+v)", err, got)
	}
	_, err = idle.Poll(ctx)
	if !IsCode(err, pb.ErrorCode_REQUEST_TIMED_OUT) {
		t.Fatalf("the idle member's stream: %v, want the session timeout (DEADLINE_EXCEEDED)", err)
	}
}

func TestGroupStreamRefusesBadOpenWithATypedError(t *testing.T) {
	c, ctx := dial(t)
	gc, err := c.ConsumeGroup(ctx, "go-group-no-topics", nil, GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := gc.Poll(ctx); !IsCode(err, pb.ErrorCode_INVALID_REQUEST) {
		t.Fatalf("opening without topics: %v, want INVALID_REQUEST", err)
	}
}
