package headwater

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// Special start offsets of ConsumePartition.
const (
	OffsetLatest   int64 = -1 // the partition's end: only records produced from now on
	OffsetEarliest int64 = -2 // the partition's first retained record
)

// Message is one consumed record.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil: null key
	Value     []byte // nil: null value
	Headers   []Header
	Timestamp time.Time
}

// ConsumerOptions configure a PartitionConsumer; the zero value is usable.
type ConsumerOptions struct {
	// MaxWait bounds each long poll (0: the broker's default, 500 ms; at most 30 s). Poll
	// returns at the latest after about this long, with no messages when none arrived.
	MaxWait time.Duration
	// MaxBytes per broker response (0: the broker's default, 1 MiB).
	MaxBytes int32
	// ReadCommitted skips records of aborted transactions and stops at the last stable offset.
	ReadCommitted bool
}

// PartitionConsumer reads one partition in offset order through a Broker.FetchRecords stream
// to the partition's leader, reopened at its position after a leader change. It is not safe
// for concurrent use; Close it when done.
type PartitionConsumer struct {
	c         *Client
	topic     string
	partition int32
	opts      ConsumerOptions

	position      int64
	highWatermark int64
	stream        pb.Broker_FetchRecordsClient
	cancel        context.CancelFunc
}

// ConsumePartition starts reading topic/partition at offset (or OffsetEarliest, OffsetLatest).
func (c *Client) ConsumePartition(
	ctx context.Context, topic string, partition int32, offset int64, opts ConsumerOptions,
) (*PartitionConsumer, error) {
	pc := &PartitionConsumer{
		c: c, topic: topic, partition: partition, opts: opts, position: offset, highWatermark: -1,
	}
	if offset < 0 {
		resolved, err := c.ListOffset(ctx, topic, partition, offset)
		if err != nil {
			return nil, err
		}
		pc.position = resolved
	}
	return pc, nil
}

// ListOffset is the offset of topic/partition at timestamp ts (ms since the epoch), or with
// OffsetLatest / OffsetEarliest the end or start of the partition (Broker.ListOffsets).
func (c *Client) ListOffset(ctx context.Context, topic string, partition int32, ts int64) (int64, error) {
	var offset int64
	err := c.retry(ctx, func() error {
		stub, err := c.leader(topic, partition)
		if err != nil {
			return err
		}
		resp, err := stub.ListOffsets(ctx, &pb.ListOffsetsRequest{
			Partitions: []*pb.ListOffsetsPartition{{Topic: topic, Partition: partition, Timestamp: ts}},
		})
		if err != nil {
			return err
		}
		if len(resp.GetPartitions()) != 1 {
			return fmt.Errorf("headwater: ListOffsets answered %d partitions, want 1", len(resp.GetPartitions()))
		}
		r := resp.GetPartitions()[0]
		offset = r.GetOffset()
		return codeError(r.GetErrorCode(), r.GetErrorMessage())
	})
	return offset, err
}

// Position is the offset of the next record Poll returns.
func (pc *PartitionConsumer) Position() int64 { return pc.position }

// HighWatermark is the partition's high watermark as of the last Poll (-1 before the first).
func (pc *PartitionConsumer) HighWatermark() int64 { return pc.highWatermark }

// Close ends the fetch stream.
func (pc *PartitionConsumer) Close() { pc.closeStream() }

func (pc *PartitionConsumer) closeStream() {
	if pc.cancel != nil {
		pc.cancel()
	}
	pc.stream, pc.cancel = nil, nil
}

func (pc *PartitionConsumer) open() error {
	stub, err := pc.c.leader(pc.topic, pc.partition)
	if err != nil {
		return err
	}
	isolation := pb.IsolationLevel_READ_UNCOMMITTED
	if pc.opts.ReadCommitted {
		isolation = pb.IsolationLevel_READ_COMMITTED
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := stub.FetchRecords(ctx, &pb.FetchRequest{
		Topic:              pc.topic,
		Partition:          pc.partition,
		Offset:             pc.position,
		MaxWaitMs:          int32(pc.opts.MaxWait / time.Millisecond),
		MaxBytes:           pc.opts.MaxBytes,
		IsolationLevel:     isolation,
		CurrentLeaderEpoch: -1,
		ClientId:           pc.c.opts.ClientID,
	})
	if err != nil {
		cancel()
		return statusError(err, nil)
	}
	pc.stream, pc.cancel = stream, cancel
	return nil
}

// Poll returns the next records of the partition (none when the long poll ended without new
// ones). Retriable errors (a leader change, ...) are retried on a new stream from Position; a
// cancelled ctx ends the call with ctx's error.
func (pc *PartitionConsumer) Poll(ctx context.Context) ([]Message, error) {
	var out []Message
	err := pc.c.retry(ctx, func() error {
		if pc.stream == nil {
			if err := pc.open(); err != nil {
				return err
			}
		}
		// a cancelled ctx ends the blocked Recv through the stream's own context (the cancel
		// func is safe to call from another goroutine; the fields are only touched here)
		stream := pc.stream
		stop := context.AfterFunc(ctx, pc.cancel)
		resp, err := stream.Recv()
		stop()
		if err != nil {
			pc.closeStream()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return err
			}
			return statusError(err, stream.Trailer())
		}
		if err := codeError(resp.GetErrorCode(), resp.GetErrorMessage()); err != nil {
			pc.closeStream() // the broker ends the stream after an error
			return err
		}
		pc.highWatermark = resp.GetHighWatermark()
		for _, r := range resp.GetRecords() {
			if r.GetOffset() < pc.position {
				continue
			}
			out = append(out, toMessage(pc.topic, pc.partition, r))
		}
		if next := resp.GetNextOffset(); next > pc.position {
			pc.position = next
		}
		if n := len(out); n > 0 && out[n-1].Offset >= pc.position {
			pc.position = out[n-1].Offset + 1
		}
		return nil
	})
	return out, err
}

// toMessage is the Message of a record of topic/partition.
func toMessage(topic string, partition int32, r *pb.Record) Message {
	m := Message{
		Topic:     topic,
		Partition: partition,
		Offset:    r.GetOffset(),
		Timestamp: time.UnixMilli(r.GetTimestamp()),
	}
	if r.Key != nil {
		m.Key = r.Key
	}
	if r.Value != nil {
		m.Value = r.Value
	}
	for _, h := range r.GetHeaders() {
		m.Headers = append(m.Headers, Header{Key: h.GetKey(), Value: h.Value})
	}
	return m
}
