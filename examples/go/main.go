// Produce ten keyed greetings, then read them as a member of the consumer group "greeters",
// committing as it goes (copies run at once share the partitions):  go run . 127.0.0.1:9092
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	headwater "headwater.dev/clients/go"
	pb "headwater.dev/clients/go/gen/headwater/v1"
)

func main() {
	bootstrap := "127.0.0.1:9092"
	if len(os.Args) > 1 {
		bootstrap = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := headwater.Dial(ctx, bootstrap, headwater.Options{ClientID: "example-go"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	_, err = client.CreateTopics(ctx, headwater.NewTopic{Name: "greetings", Partitions: 3})
	if err != nil && !headwater.IsCode(err, pb.ErrorCode_TOPIC_ALREADY_EXISTS) {
		log.Fatal(err)
	}

	producer := client.NewProducer(headwater.ProducerOptions{})
	for i := 0; i < 10; i++ {
		record := headwater.Record{Key: []byte(fmt.Sprintf("user-%d", i)), Value: []byte(fmt.Sprintf("hello %d", i))}
		if _, err := producer.Send(ctx, "greetings", record); err != nil {
			log.Fatal(err)
		}
	}

	group, err := client.ConsumeGroup(ctx, "greeters", []string{"greetings"}, headwater.GroupOptions{Earliest: true})
	if err != nil {
		log.Fatal(err)
	}
	defer group.Close()
	for seen := 0; seen < 10; {
		messages, err := group.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range messages {
			fmt.Printf("%s-%d@%d %s: %s\n", m.Topic, m.Partition, m.Offset, m.Key, m.Value)
		}
		seen += len(messages)
		if err := group.Commit(ctx); err != nil {
			log.Fatal(err)
		}
	}
}
