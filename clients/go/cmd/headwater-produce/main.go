// Command headwater-produce sends N keyed records to a topic with the Go client (idempotent
// producer, keys placed by the shared partitioner): record i has key "key-<i mod keys>" and
// value "value-<i>". It prints "produced N" and exits 0 once every record is acknowledged.
// tests/interop/test_cross_language_group.py uses it as the Go side of the cross-language group
// test.
//
//	headwater-produce -bootstrap 127.0.0.1:9092 -topic t -n 1000 [-keys 50] [-batch 50]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	headwater "headwater.dev/clients/go"
)

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "host:port of a broker")
	topic := flag.String("topic", "", "the topic (must exist)")
	n := flag.Int("n", 100, "how many records")
	keys := flag.Int("keys", 50, "how many distinct keys")
	batch := flag.Int("batch", 50, "records per Send")
	timeout := flag.Duration("timeout", 2*time.Minute, "the whole run's deadline")
	flag.Parse()
	if *topic == "" || *n < 0 || *keys < 1 || *batch < 1 {
		log.Fatal("headwater-produce: -topic is required; -n >= 0, -keys >= 1, -batch >= 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := headwater.Dial(ctx, *bootstrap, headwater.Options{ClientID: "headwater-produce"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p := c.NewProducer(headwater.ProducerOptions{})
	for start := 0; start < *n; start += *batch {
		end := min(start+*batch, *n)
		records := make([]headwater.Record, 0, end-start)
		for i := start; i < end; i++ {
			records = append(records, headwater.Record{
				Key:   []byte(fmt.Sprintf("key-%d", i%*keys)),
				Value: []byte(fmt.Sprintf("value-%d", i)),
			})
		}
		if _, err := p.Send(ctx, *topic, records...); err != nil {
			log.Fatalf("headwater-produce: records %d..%d: %v", start, end-1, err)
		}
	}
	fmt.Printf("produced %d\n", *n)
}
