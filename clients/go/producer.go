package headwater

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// Header is one record header; a nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// Record is what a Producer sends. A nil Key or Value is null (a nil Value is a tombstone on
// a compacted topic); an empty, non-nil slice is an empty key or value.
type Record struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time // zero: the broker's clock
}

// RecordMetadata says where a sent record was stored.
type RecordMetadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

// ProducerOptions configure a Producer; the zero value is usable.
type ProducerOptions struct {
	// Compression of the batches the broker builds: "", "none", "gzip", "lz4", "zstd".
	Compression string
	// Timeout is the broker's wait for the in-sync replicas (0: the broker's 30 s default).
	Timeout time.Duration
}

// Producer sends records through the records path (Broker.ProduceRecords) with acks=all, as an
// idempotent producer: it takes a producer id from Broker.InitProducerId on first use and
// numbers each partition's records, so a request retried after a lost answer or a leader change
// is stored once (the broker answers the retry with the original offset). Requests to one
// partition are sent one at a time, in order; different partitions in parallel.
//
// A send that fails without a known outcome (retries exhausted, context cancelled) drops the
// producer id; the next send takes a new one, so it never trips over a sequence gap.
// A Producer is safe for concurrent use.
type Producer struct {
	c    *Client
	opts ProducerOptions

	mu         sync.Mutex
	ident      *producerIdentity // nil: take one on the next send
	parts      map[topicPartition]*partitionSequence
	roundRobin map[string]int
}

type producerIdentity struct {
	id    int64
	epoch int32
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitionSequence is the next sequence of one partition under one producer identity; its
// mutex keeps one request per partition in flight.
type partitionSequence struct {
	mu    sync.Mutex
	ident *producerIdentity
	next  int32
}

// NewProducer returns a Producer sending through c.
func (c *Client) NewProducer(opts ProducerOptions) *Producer {
	return &Producer{
		c:          c,
		opts:       opts,
		parts:      map[topicPartition]*partitionSequence{},
		roundRobin: map[string]int{},
	}
}

// Send sends records to topic: a record with a key goes to Partition(key, partitions), the
// partitioner every Headwater client shares; records with a nil key are spread round-robin.
// The result has one RecordMetadata per record, in order. On error, records of partitions whose
// request succeeded are stored (the error names the partitions that failed).
func (p *Producer) Send(ctx context.Context, topic string, records ...Record) ([]RecordMetadata, error) {
	n, err := p.c.partitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	targets := make([]int32, len(records))
	p.mu.Lock()
	for i, r := range records {
		if r.Key != nil {
			targets[i] = int32(Partition(r.Key, n))
		} else {
			targets[i] = int32(p.roundRobin[topic] % n)
			p.roundRobin[topic]++
		}
	}
	p.mu.Unlock()
	return p.sendGrouped(ctx, topic, records, targets)
}

// SendTo sends records to one partition of topic, in order.
func (p *Producer) SendTo(
	ctx context.Context, topic string, partition int32, records ...Record,
) ([]RecordMetadata, error) {
	targets := make([]int32, len(records))
	for i := range targets {
		targets[i] = partition
	}
	return p.sendGrouped(ctx, topic, records, targets)
}

func (p *Producer) sendGrouped(
	ctx context.Context, topic string, records []Record, targets []int32,
) ([]RecordMetadata, error) {
	if len(records) == 0 {
		return nil, nil
	}
	groups := map[int32][]int{} // partition -> indexes into records
	for i, t := range targets {
		groups[t] = append(groups[t], i)
	}
	out := make([]RecordMetadata, len(records))
	errs := make(chan error, len(groups))
	var wg sync.WaitGroup
	for partition, idx := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs := make([]Record, len(idx))
			for j, i := range idx {
				recs[j] = records[i]
			}
			base, err := p.sendPartition(ctx, topic, partition, recs)
			if err != nil {
				errs <- fmt.Errorf("%s-%d: %w", topic, partition, err)
				return
			}
			for j, i := range idx {
				out[i] = RecordMetadata{Topic: topic, Partition: partition, Offset: base + int64(j)}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		return out, errors.Join(all...)
	}
	return out, nil
}

// identity is the producer id and epoch, taken from Broker.InitProducerId when there is none.
func (p *Producer) identity(ctx context.Context) (*producerIdentity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ident != nil {
		return p.ident, nil
	}
	var resp *pb.InitProducerIdResponse
	err := p.c.retry(ctx, func() error {
		stub, err := p.c.anyBroker()
		if err != nil {
			return err
		}
		resp, err = stub.InitProducerId(ctx, &pb.InitProducerIdRequest{ProducerId: -1, ProducerEpoch: -1})
		if err != nil {
			return err
		}
		return codeError(resp.GetErrorCode(), resp.GetErrorMessage())
	})
	if err != nil {
		return nil, err
	}
	p.ident = &producerIdentity{id: resp.GetProducerId(), epoch: resp.GetProducerEpoch()}
	return p.ident, nil
}

// dropIdentity forgets ident (if still current) after a send with an unknown outcome.
func (p *Producer) dropIdentity(ident *producerIdentity) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ident == ident {
		p.ident = nil
	}
}

func (p *Producer) sequence(tp topicPartition) *partitionSequence {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.parts[tp]
	if !ok {
		s = &partitionSequence{}
		p.parts[tp] = s
	}
	return s
}

// sendPartition sends records to one partition with the partition's next sequence, retrying
// retriable errors with the same sequence; returns the base offset.
func (p *Producer) sendPartition(
	ctx context.Context, topic string, partition int32, records []Record,
) (int64, error) {
	seq := p.sequence(topicPartition{topic, partition})
	seq.mu.Lock()
	defer seq.mu.Unlock()
	ident, err := p.identity(ctx)
	if err != nil {
		return 0, err
	}
	if seq.ident != ident {
		seq.ident, seq.next = ident, 0
	}
	req := p.request(topic, partition, records, ident, seq.next)
	base, err := p.produce(ctx, req)
	if err != nil {
		p.dropIdentity(ident)
		return 0, err
	}
	seq.next = int32((int64(seq.next) + int64(len(records))) % (1 << 31))
	return base, nil
}

func (p *Producer) request(
	topic string, partition int32, records []Record, ident *producerIdentity, seq int32,
) *pb.ProduceRecordsRequest {
	recs := make([]*pb.Record, len(records))
	for i, r := range records {
		rec := &pb.Record{Key: r.Key, Value: r.Value}
		if !r.Timestamp.IsZero() {
			rec.Timestamp = r.Timestamp.UnixMilli()
		}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, &pb.RecordHeader{Key: h.Key, Value: h.Value})
		}
		recs[i] = rec
	}
	return &pb.ProduceRecordsRequest{
		Topic:         topic,
		Partition:     partition,
		Acks:          pb.Acks_ACKS_ALL,
		TimeoutMs:     int32(p.opts.Timeout / time.Millisecond),
		Records:       recs,
		ClientId:      p.c.opts.ClientID,
		Compression:   p.opts.Compression,
		ProducerId:    &ident.id,
		ProducerEpoch: ident.epoch,
		BaseSequence:  seq,
	}
}

// produce sends req to the partition's leader until it is answered without a retriable error;
// returns the base offset (the original one when a retry was a duplicate).
func (p *Producer) produce(ctx context.Context, req *pb.ProduceRecordsRequest) (int64, error) {
	var base int64
	err := p.c.retry(ctx, func() error {
		stub, err := p.c.leader(req.GetTopic(), req.GetPartition())
		if err != nil {
			return err
		}
		resp, err := stub.ProduceRecords(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.GetPartitions()) != 1 {
			return fmt.Errorf("headwater: ProduceRecords answered %d partitions, want 1", len(resp.GetPartitions()))
		}
		r := resp.GetPartitions()[0]
		base = r.GetBaseOffset()
		return codeError(r.GetErrorCode(), r.GetErrorMessage())
	})
	return base, err
}
