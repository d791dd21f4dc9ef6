package headwater

import (
	"context"
	"errors"
	"fmt"
	"sort"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// NewTopic is a topic to create. Zero Partitions means 1; zero ReplicationFactor means 3, or
// the number of live brokers if fewer (controller.proto NewTopic).
type NewTopic struct {
	Name              string
	Partitions        int32
	ReplicationFactor int32
	Configs           map[string]string
}

// TopicDescription is a topic as the cluster metadata describes it.
type TopicDescription struct {
	Name       string
	TopicID    string
	Partitions []PartitionDescription // by partition number
	Configs    map[string]string      // topic-level overrides only
}

// PartitionDescription is one partition's leadership state; Leader is -1 when it has none.
type PartitionDescription struct {
	Partition   int32
	Leader      int32
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
}

// controller is a Controller stub for the active controller named by the metadata.
func (c *Client) controller() (pb.ControllerClient, error) {
	ctl := c.metadata().GetController()
	if ctl == nil || ctl.GetPort() == 0 {
		return nil, &Error{Code: pb.ErrorCode_NOT_CONTROLLER, Message: "no active controller is known"}
	}
	cc, err := c.conn(endpoint(ctl))
	if err != nil {
		return nil, err
	}
	return pb.NewControllerClient(cc), nil
}

// CreateTopics creates topics on the active controller and returns name -> topic id of those
// created; the error joins one *Error per topic that was refused (TOPIC_ALREADY_EXISTS, ...).
// A topic's partitions get leaders shortly after; Producer and PartitionConsumer retry until
// then.
func (c *Client) CreateTopics(ctx context.Context, topics ...NewTopic) (map[string]string, error) {
	req := &pb.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, &pb.NewTopic{
			Name: t.Name, Partitions: t.Partitions, ReplicationFactor: t.ReplicationFactor, Configs: t.Configs,
		})
	}
	var resp *pb.CreateTopicsResponse
	err := c.retry(ctx, func() error {
		stub, err := c.controller()
		if err != nil {
			return err
		}
		resp, err = stub.CreateTopics(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	var errs []error
	for _, r := range resp.GetTopics() {
		if err := codeError(r.GetErrorCode(), r.GetErrorMessage()); err != nil {
			errs = append(errs, fmt.Errorf("topic %q: %w", r.GetName(), err))
			continue
		}
		ids[r.GetName()] = r.GetTopicId()
	}
	_, merr := c.RefreshMetadata(ctx)
	return ids, errors.Join(append(errs, merr)...)
}

// ListTopics is the sorted names of the cluster's topics (fresh metadata).
func (c *Client) ListTopics(ctx context.Context) ([]string, error) {
	meta, err := c.RefreshMetadata(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(meta.GetTopics()))
	for _, t := range meta.GetTopics() {
		names = append(names, t.GetName())
	}
	sort.Strings(names)
	return names, nil
}

// DescribeTopics describes the named topics, or every topic when none is named (fresh
// metadata, sorted by name when listing all); an unknown name is UNKNOWN_TOPIC_OR_PARTITION.
func (c *Client) DescribeTopics(ctx context.Context, names ...string) ([]TopicDescription, error) {
	meta, err := c.RefreshMetadata(ctx)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		for _, t := range meta.GetTopics() {
			names = append(names, t.GetName())
		}
		sort.Strings(names)
	}
	out := make([]TopicDescription, 0, len(names))
	for _, name := range names {
		t := topicOf(meta, name)
		if t == nil {
			return nil, &Error{
				Code:    pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION,
				Message: fmt.Sprintf("topic %q does not exist", name),
			}
		}
		d := TopicDescription{Name: name, TopicID: t.GetTopicId(), Configs: t.GetConfigs()}
		for _, p := range t.GetPartitions() {
			d.Partitions = append(d.Partitions, PartitionDescription{
				Partition:   p.GetPartition(),
				Leader:      p.GetLeader(),
				LeaderEpoch: p.GetLeaderEpoch(),
				Replicas:    p.GetReplicas(),
				ISR:         p.GetIsr(),
			})
		}
		sort.Slice(d.Partitions, func(i, j int) bool { return d.Partitions[i].Partition < d.Partitions[j].Partition })
		out = append(out, d)
	}
	return out, nil
}
