// Package headwater is a small Go client for Headwater, built on the gRPC API in proto/
// (docs/api.md) and its generated code in gen/headwater/v1: a Producer (keys placed with the
// cross-language partitioner, idempotent retries), a partition consumer (FetchRecords), a
// group consumer (the group stream, GroupStreamService.Consume) and admin basics (create,
// list, describe topics).
//
// A Client holds one gRPC connection per cluster address and the cluster metadata; it is safe
// for concurrent use. Produce and fetch go to each partition's leader, admin calls to the
// active controller, both found in a broker's Metadata answer and refreshed when a call is
// answered NOT_LEADER_OR_FOLLOWER, NOT_CONTROLLER or the like.
package headwater

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// Options of Dial; the zero value is usable.
type Options struct {
	// ClientID is sent as client_id with produce and fetch requests (quotas, logs).
	ClientID string
	// DialOptions replace the default (plaintext) transport options, e.g. for TLS.
	DialOptions []grpc.DialOption
	// RetryBackoff is the pause between retries of a retriable error (default 100 ms).
	RetryBackoff time.Duration
	// Retries is how many times a retriable error is retried (default 10).
	Retries int
}

// Client is a connection to a Headwater cluster. Close it when done.
type Client struct {
	bootstrap []string
	opts      Options

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	meta  *pb.MetadataResponse
}

// Dial connects to the cluster through any of the comma-separated bootstrap addresses
// ("host:port,host:port") and reads its metadata once.
func Dial(ctx context.Context, bootstrap string, opts Options) (*Client, error) {
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = 100 * time.Millisecond
	}
	if opts.Retries <= 0 {
		opts.Retries = 10
	}
	var addrs []string
	for _, a := range strings.Split(bootstrap, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, errors.New("headwater: no bootstrap address")
	}
	c := &Client{bootstrap: addrs, opts: opts, conns: map[string]*grpc.ClientConn{}}
	if _, err := c.RefreshMetadata(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.conns, addr)
	}
	return first
}

// unaryErrors turns every failed unary call into an *Error (see statusError).
func unaryErrors(
	ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption,
) error {
	var trailer metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
	return statusError(err, trailer)
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	dial := c.opts.DialOptions
	if dial == nil {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	dial = append(dial, grpc.WithChainUnaryInterceptor(unaryErrors))
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("headwater: connecting to %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

func endpoint(b *pb.BrokerInfo) string {
	return net.JoinHostPort(b.GetHost(), strconv.Itoa(int(b.GetPort())))
}

// RefreshMetadata asks the known brokers (then the bootstrap addresses) for the cluster
// metadata, all topics included, and keeps the first answer.
func (c *Client) RefreshMetadata(ctx context.Context) (*pb.MetadataResponse, error) {
	c.mu.Lock()
	var addrs []string
	if c.meta != nil {
		for _, b := range c.meta.GetBrokers() {
			addrs = append(addrs, endpoint(b))
		}
	}
	c.mu.Unlock()
	addrs = append(addrs, c.bootstrap...)
	var last error
	for _, addr := range addrs {
		cc, err := c.conn(addr)
		if err != nil {
			last = err
			continue
		}
		resp, err := pb.NewBrokerClient(cc).Metadata(ctx, &pb.MetadataRequest{})
		if err != nil {
			last = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		c.mu.Lock()
		c.meta = resp
		c.mu.Unlock()
		return resp, nil
	}
	return nil, fmt.Errorf("headwater: no broker answered Metadata: %w", last)
}

// metadata is the last metadata read (never nil after Dial).
func (c *Client) metadata() *pb.MetadataResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meta
}

func topicOf(meta *pb.MetadataResponse, topic string) *pb.TopicMetadata {
	for _, t := range meta.GetTopics() {
		if t.GetName() == topic {
			return t
		}
	}
	return nil
}

// partitionCount is the number of partitions of topic; a topic missing from the metadata is
// looked up again (retry: a topic just created reaches the brokers' metadata shortly after),
// then UNKNOWN_TOPIC_OR_PARTITION.
func (c *Client) partitionCount(ctx context.Context, topic string) (int, error) {
	var n int
	err := c.retry(ctx, func() error {
		t := topicOf(c.metadata(), topic)
		if t == nil || len(t.GetPartitions()) == 0 {
			return &Error{
				Code:    pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION,
				Message: fmt.Sprintf("topic %q does not exist", topic),
			}
		}
		n = len(t.GetPartitions())
		return nil
	})
	return n, err
}

// leader is a Broker stub for the leader of topic/partition as the last metadata has it.
func (c *Client) leader(topic string, partition int32) (pb.BrokerClient, error) {
	meta := c.metadata()
	t := topicOf(meta, topic)
	if t == nil {
		return nil, &Error{
			Code:    pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION,
			Message: fmt.Sprintf("topic %q is not in the metadata", topic),
		}
	}
	for _, p := range t.GetPartitions() {
		if p.GetPartition() != partition {
			continue
		}
		for _, b := range meta.GetBrokers() {
			if b.GetBrokerId() == p.GetLeader() {
				cc, err := c.conn(endpoint(b))
				if err != nil {
					return nil, err
				}
				return pb.NewBrokerClient(cc), nil
			}
		}
		return nil, &Error{
			Code:    pb.ErrorCode_LEADER_NOT_AVAILABLE,
			Message: fmt.Sprintf("%s-%d has no live leader", topic, partition),
		}
	}
	return nil, &Error{
		Code:    pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION,
		Message: fmt.Sprintf("%s has no partition %d", topic, partition),
	}
}

// anyBroker is a Broker stub for some broker of the cluster.
func (c *Client) anyBroker() (pb.BrokerClient, error) {
	addr := c.bootstrap[0]
	if bs := c.metadata().GetBrokers(); len(bs) > 0 {
		addr = endpoint(bs[0])
	}
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewBrokerClient(cc), nil
}

// retry runs call until it succeeds, fails with an error that is not retriable, or has failed
// opts.Retries + 1 times; before each retry it waits RetryBackoff and refreshes the metadata.
func (c *Client) retry(ctx context.Context, call func() error) error {
	var err error
	for attempt := 0; ; attempt++ {
		if err = call(); err == nil || !IsRetriable(err) || attempt >= c.opts.Retries {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(c.opts.RetryBackoff):
		}
		if _, merr := c.RefreshMetadata(ctx); merr != nil && ctx.Err() != nil {
			return errors.Join(err, merr)
		}
	}
}
