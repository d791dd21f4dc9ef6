package headwater

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// GroupOptions configure a GroupConsumer; the zero value is usable.
type GroupOptions struct {
	// MemberID is the member's identity in the group (a UUID or a stable name), its static
	// group_instance_id. Reopening with the same MemberID rejoins with a rebalance (while an
	// old stream with it is still held, that one is fenced). "": the server picks one
	// (GroupConsumer.MemberID).
	MemberID string
	// SessionTimeout: a member the server hears nothing from for this long leaves the group
	// (0: the server's default, 45 s).
	SessionTimeout time.Duration
	// Earliest starts partitions without a committed offset at their first record (default:
	// at their end, only records produced from now on, as Kafka's auto.offset.reset=latest).
	Earliest bool
	// ReadCommitted skips records of aborted transactions and stops at the last stable offset.
	ReadCommitted bool
	// MaxOutstandingRecords and MaxOutstandingBytes bound what the server may send ahead of
	// the application (the credit window; defaults 1000 records, 8 MiB): records received but
	// not yet returned by Poll. Credit for records is granted back as Poll returns them.
	MaxOutstandingRecords int32
	MaxOutstandingBytes   int64
	// MaxPollRecords bounds the messages one Poll returns (default 500).
	MaxPollRecords int
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Assignment is a member's share of the group after a rebalance.
type Assignment struct {
	Generation int32
	Partitions []TopicPartition // sorted by topic, then partition
}

// GroupConsumer consumes topics as one member of a consumer group over
// GroupStreamService.Consume (proto/headwater/v1/group_stream.proto): the server joins the
// group for it, computes and rebalances the assignment, fetches the assigned partitions and
// sends their records within the credit the client grants. Poll returns records, Commit
// commits offsets on the same stream, Close leaves the group at once.
//
// Liveness: while the application calls Poll at least once per session timeout (or is blocked
// in Poll), the client sends a KeepAlive every third of it (at most 3 s apart), so a slow
// processing step does not cost the member its partitions; an application that stops calling
// Poll stops being assigned after the session timeout, as with Kafka's max.poll.interval.ms.
//
// Delivery is at least once: after a rebalance a partition resumes at its committed offset,
// so records returned but not committed may be delivered again (to this member or another).
// A GroupConsumer is safe for concurrent use, though one goroutine calling Poll is the usual
// pattern. When the stream fails (the broker went away, the member was fenced), Poll and
// Commit return the error, an *Error with the ErrorCode of the stream's headwater-error-code
// trailer when it has one; open a new GroupConsumer (with the same MemberID) to go on.
type GroupConsumer struct {
	opts   GroupOptions
	stream pb.GroupStreamService_ConsumeClient
	cancel context.CancelFunc
	done   chan struct{} // closed when the receive loop ended; err is set then

	sendMu sync.Mutex // one Send at a time (grpc-go streams allow one sender)

	mu         sync.Mutex
	notify     chan struct{} // closed and replaced when records, an assignment or an error arrive
	err        error
	memberID   string
	assignment Assignment
	assigned   map[TopicPartition]bool
	queue      []Message
	positions  map[TopicPartition]int64 // after the last message Poll returned, per partition
	commits    map[int64]chan *pb.ConsumeCommitResult
	nextCommit int64
	lastPoll   time.Time
	polling    int
	closed     bool
}

// ErrGroupConsumerClosed is returned by Poll and Commit after Close.
var ErrGroupConsumerClosed = errors.New("headwater: group consumer closed")

// ConsumeGroup joins group as a member consuming topics. It returns once the stream is open;
// the first assignment arrives with the server's first rebalance (Assignment, WaitAssignment).
func (c *Client) ConsumeGroup(
	ctx context.Context, group string, topics []string, opts GroupOptions,
) (*GroupConsumer, error) {
	if opts.MaxOutstandingRecords <= 0 {
		opts.MaxOutstandingRecords = 1000
	}
	if opts.MaxOutstandingBytes <= 0 {
		opts.MaxOutstandingBytes = 8 << 20
	}
	if opts.MaxPollRecords <= 0 {
		opts.MaxPollRecords = 500
	}
	open := &pb.ConsumeOpen{
		GroupId:          group,
		Topics:           topics,
		MemberId:         opts.MemberID,
		ClientId:         c.opts.ClientID,
		SessionTimeoutMs: int32(opts.SessionTimeout / time.Millisecond),
		OffsetReset:      pb.OffsetReset_OFFSET_RESET_LATEST,
		Format:           pb.DeliveryFormat_DELIVERY_FORMAT_RECORDS,
		IsolationLevel:   pb.IsolationLevel_READ_UNCOMMITTED,
		CreditRecords:    opts.MaxOutstandingRecords,
		CreditBytes:      opts.MaxOutstandingBytes,
	}
	if opts.Earliest {
		open.OffsetReset = pb.OffsetReset_OFFSET_RESET_EARLIEST
	}
	if opts.ReadCommitted {
		open.IsolationLevel = pb.IsolationLevel_READ_COMMITTED
	}
	var gc *GroupConsumer
	err := c.retry(ctx, func() error {
		cc, err := c.conn(c.randomBroker())
		if err != nil {
			return err
		}
		// the stream outlives ctx (which bounds the opening only); Close cancels it
		sctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, cancel)
		stream, err := pb.NewGroupStreamServiceClient(cc).Consume(sctx)
		if err == nil {
			err = stream.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Open{Open: open}})
		}
		if !stop() || err != nil {
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return statusError(err, nil)
		}
		gc = &GroupConsumer{
			opts: opts, stream: stream, cancel: cancel, done: make(chan struct{}),
			notify: make(chan struct{}), memberID: opts.MemberID, assigned: map[TopicPartition]bool{},
			positions: map[TopicPartition]int64{}, commits: map[int64]chan *pb.ConsumeCommitResult{},
			lastPoll: time.Now(),
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	go gc.receive()
	go gc.keepAlive()
	return gc, nil
}

// randomBroker is the address of a broker of the last metadata (a bootstrap address if none),
// picked at random so that members spread over the brokers that serve their streams.
func (c *Client) randomBroker() string {
	if bs := c.metadata().GetBrokers(); len(bs) > 0 {
		return endpoint(bs[rand.IntN(len(bs))])
	}
	return c.bootstrap[0]
}

// MemberID is the member's id: GroupOptions.MemberID, or the one the server picked as of the
// first assignment.
func (gc *GroupConsumer) MemberID() string {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return gc.memberID
}

// Assignment is the member's current assignment (generation 0, no partitions before the first).
func (gc *GroupConsumer) Assignment() Assignment {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return gc.assignment
}

// WaitAssignment waits until an assignment satisfies ok (e.g. a generation after a known one,
// or a partition count) and returns it; it ends with ctx's error or the stream's.
// Waiting counts as polling for liveness.
func (gc *GroupConsumer) WaitAssignment(ctx context.Context, ok func(Assignment) bool) (Assignment, error) {
	defer gc.busy()()
	for {
		gc.mu.Lock()
		a, err, notify := gc.assignment, gc.err, gc.notify
		gc.mu.Unlock()
		if a.Generation > 0 && ok(a) {
			return a, nil
		}
		if err != nil {
			return a, err
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-notify:
		}
	}
}

// signal wakes the waiters of Poll and WaitAssignment; gc.mu is held.
func (gc *GroupConsumer) signal() {
	close(gc.notify)
	gc.notify = make(chan struct{})
}

// receive reads the stream until it ends and dispatches each response.
func (gc *GroupConsumer) receive() {
	defer close(gc.done)
	for {
		resp, err := gc.stream.Recv()
		if err != nil {
			gc.fail(gc.streamError(err))
			return
		}
		switch r := resp.GetResponse().(type) {
		case *pb.ConsumeResponse_Assignment:
			gc.assign(r.Assignment)
		case *pb.ConsumeResponse_Records:
			gc.enqueue(r.Records)
		case *pb.ConsumeResponse_CommitResult:
			gc.mu.Lock()
			ch := gc.commits[r.CommitResult.GetCommitId()]
			delete(gc.commits, r.CommitResult.GetCommitId())
			gc.mu.Unlock()
			if ch != nil {
				ch <- r.CommitResult
			}
		}
	}
}

// streamError is the error the stream ended with: an *Error with the trailer's ErrorCode, the
// end of a stream the server closed cleanly, or the closing of the consumer.
func (gc *GroupConsumer) streamError(err error) error {
	gc.mu.Lock()
	closed := gc.closed
	gc.mu.Unlock()
	if closed || status.Code(err) == codes.Canceled {
		return ErrGroupConsumerClosed
	}
	if errors.Is(err, io.EOF) {
		return errors.New("headwater: the server ended the group stream")
	}
	return statusError(err, gc.stream.Trailer())
}

// fail records the stream's end; every waiting Poll, Commit and WaitAssignment returns err.
func (gc *GroupConsumer) fail(err error) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.err == nil {
		gc.err = err
	}
	for id, ch := range gc.commits {
		close(ch)
		delete(gc.commits, id)
	}
	gc.signal()
}

// assign installs a new assignment: buffered records of revoked partitions are dropped (their
// credit granted back) and so are their positions, as the server sends nothing more of them.
func (gc *GroupConsumer) assign(a *pb.ConsumeAssignment) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	next := Assignment{Generation: a.GetGenerationId()}
	assigned := map[TopicPartition]bool{}
	for _, p := range a.GetPartitions() {
		tp := TopicPartition{p.GetTopic(), p.GetPartition()}
		assigned[tp] = true
		next.Partitions = append(next.Partitions, tp)
	}
	sort.Slice(next.Partitions, func(i, j int) bool {
		x, y := next.Partitions[i], next.Partitions[j]
		return x.Topic < y.Topic || x.Topic == y.Topic && x.Partition < y.Partition
	})
	kept := gc.queue[:0]
	var dropped []Message
	for _, m := range gc.queue {
		if assigned[TopicPartition{m.Topic, m.Partition}] {
			kept = append(kept, m)
		} else {
			dropped = append(dropped, m)
		}
	}
	gc.queue = kept
	for tp := range gc.positions {
		if !assigned[tp] {
			delete(gc.positions, tp)
		}
	}
	if a.GetMemberId() != "" {
		gc.memberID = a.GetMemberId()
	}
	gc.assignment, gc.assigned = next, assigned
	gc.signal()
	if len(dropped) > 0 {
		go gc.grant(dropped) // not under gc.mu: Send may block on flow control
	}
}

func (gc *GroupConsumer) enqueue(r *pb.ConsumeRecords) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	tp := TopicPartition{r.GetTopic(), r.GetPartition()}
	for _, rec := range r.GetRecords() {
		gc.queue = append(gc.queue, toMessage(tp.Topic, tp.Partition, rec))
	}
	gc.signal()
}

// credit is what messages count against the credit window: records, and bytes of keys and
// values (the server's measure for DELIVERY_FORMAT_RECORDS).
func credit(msgs []Message) *pb.ConsumeCredit {
	cr := &pb.ConsumeCredit{Records: int32(len(msgs))}
	for _, m := range msgs {
		cr.Bytes += int64(len(m.Key) + len(m.Value))
	}
	return cr
}

// grant gives the server credit for msgs, which left the client's buffer.
func (gc *GroupConsumer) grant(msgs []Message) error {
	return gc.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Credit{Credit: credit(msgs)}})
}

func (gc *GroupConsumer) send(req *pb.ConsumeRequest) error {
	gc.sendMu.Lock()
	defer gc.sendMu.Unlock()
	if err := gc.stream.Send(req); err != nil {
		// the receive loop sees why the stream ended
		<-gc.done
		gc.mu.Lock()
		defer gc.mu.Unlock()
		return gc.err
	}
	return nil
}

// keepAlive sends a KeepAlive every third of the session timeout (at most every 3 s, as the
// server's member heartbeats) while the application is polling (see GroupConsumer).
func (gc *GroupConsumer) keepAlive() {
	session := gc.opts.SessionTimeout
	if session <= 0 {
		session = 45 * time.Second // the server's default session timeout
	}
	tick := time.NewTicker(min(session/3, 3*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-gc.done:
			return
		case <-tick.C:
		}
		gc.mu.Lock()
		alive := gc.polling > 0 || time.Since(gc.lastPoll) < session
		gc.mu.Unlock()
		if alive {
			_ = gc.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_KeepAlive{KeepAlive: &pb.ConsumeKeepAlive{}}})
		}
	}
}

// busy marks the application as polling until the returned func is called (keepAlive).
func (gc *GroupConsumer) busy() func() {
	gc.mu.Lock()
	gc.polling++
	gc.mu.Unlock()
	return func() {
		gc.mu.Lock()
		gc.polling--
		gc.lastPoll = time.Now()
		gc.mu.Unlock()
	}
}

// Poll returns the next messages of the assigned partitions (at most MaxPollRecords, at least
// one), waiting until some arrive; it ends with ctx's error, or the stream's if it failed.
// The returned messages' credit is granted back to the server, and their offsets become the
// positions Commit commits.
func (gc *GroupConsumer) Poll(ctx context.Context) ([]Message, error) {
	defer gc.busy()()
	for {
		gc.mu.Lock()
		if gc.closed {
			gc.mu.Unlock()
			return nil, ErrGroupConsumerClosed
		}
		if len(gc.queue) > 0 {
			n := min(len(gc.queue), gc.opts.MaxPollRecords)
			out := make([]Message, n)
			copy(out, gc.queue)
			gc.queue = gc.queue[n:]
			for _, m := range out {
				gc.positions[TopicPartition{m.Topic, m.Partition}] = m.Offset + 1
			}
			gc.mu.Unlock()
			return out, gc.grant(out)
		}
		if gc.err != nil {
			err := gc.err
			gc.mu.Unlock()
			return nil, err
		}
		notify := gc.notify
		gc.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-notify:
		}
	}
}

// Commit commits, for every assigned partition, the offset after the last message Poll
// returned (nothing when Poll returned none since the assignment).
func (gc *GroupConsumer) Commit(ctx context.Context) error {
	gc.mu.Lock()
	offsets := make(map[TopicPartition]int64, len(gc.positions))
	for tp, o := range gc.positions {
		offsets[tp] = o
	}
	gc.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	return gc.CommitOffsets(ctx, offsets)
}

// CommitOffsets commits offsets (the next offset to consume of each partition) on the stream
// and waits for the server's answer. Partitions no longer assigned to this member are refused
// (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID): the error joins one *Error per refused partition,
// each wrapped with the partition's name; the others are committed.
func (gc *GroupConsumer) CommitOffsets(ctx context.Context, offsets map[TopicPartition]int64) error {
	req := &pb.ConsumeCommit{}
	for tp, o := range offsets {
		req.Offsets = append(req.Offsets, &pb.ConsumeCommitOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: o})
	}
	ch := make(chan *pb.ConsumeCommitResult, 1)
	gc.mu.Lock()
	if gc.closed {
		gc.mu.Unlock()
		return ErrGroupConsumerClosed
	}
	if gc.err != nil {
		err := gc.err
		gc.mu.Unlock()
		return err
	}
	gc.nextCommit++
	req.CommitId = gc.nextCommit
	gc.commits[req.CommitId] = ch
	gc.mu.Unlock()
	if err := gc.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Commit{Commit: req}}); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		gc.mu.Lock()
		delete(gc.commits, req.CommitId)
		gc.mu.Unlock()
		return ctx.Err()
	case res, ok := <-ch:
		if !ok {
			gc.mu.Lock()
			defer gc.mu.Unlock()
			return gc.err
		}
		errs := []error{codeError(res.GetErrorCode(), res.GetErrorMessage())}
		for _, p := range res.GetPartitions() {
			if err := codeError(p.GetErrorCode(), p.GetErrorMessage()); err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", p.GetTopic(), p.GetPartition(), err))
			}
		}
		return errors.Join(errs...)
	}
}

// Close closes the stream: the member leaves the group at once and its partitions go to the
// other members (with what this member committed). Uncommitted positions are not committed;
// call Commit first. Close waits up to 10 s for the server to end the stream.
func (gc *GroupConsumer) Close() error {
	gc.mu.Lock()
	if gc.closed {
		gc.mu.Unlock()
		return nil
	}
	gc.closed = true
	gc.mu.Unlock()
	gc.sendMu.Lock()
	err := gc.stream.CloseSend()
	gc.sendMu.Unlock()
	select {
	case <-gc.done:
	case <-time.After(10 * time.Second):
		err = errors.Join(err, errors.New("headwater: the server did not end the group stream within 10 s"))
	}
	gc.cancel()
	<-gc.done
	return err
}
