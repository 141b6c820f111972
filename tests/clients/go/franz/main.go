// The contract's client for franz-go (kgo), client "franz-go".
//
// --conf takes the kgo options named in `options` below, by their kgo function name
// (RequestTimeoutOverhead=5s, RecordRetries=0, MaxVersions=3.9). Throttles come from the
// HookBrokerThrottle hook, which kgo calls for every response with a non-zero throttle_time_ms.
// kgo is idempotent by default; the contract's producer is idempotent only with --idempotent.
package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"kqpclients/contract"
)

type franzClient struct{}

func (franzClient) Name() string { return "franz-go" }

func (franzClient) Version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/twmb/franz-go" {
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "unknown"
}

// throttleHook keeps every throttle kgo was told.
type throttleHook struct {
	mu   sync.Mutex
	seen contract.Throttles
}

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, interval time.Duration, _ bool) {
	h.mu.Lock()
	h.seen.Add(float64(interval) / float64(time.Millisecond))
	h.mu.Unlock()
}

func (h *throttleHook) result() *contract.Throttles {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := h.seen
	return &seen
}

func duration(f func(time.Duration) kgo.Opt) func(string) (kgo.Opt, error) {
	return func(s string) (kgo.Opt, error) {
		d, err := time.ParseDuration(s)
		return f(d), err
	}
}

func integer[T int | int32](f func(T) kgo.Opt) func(string) (kgo.Opt, error) {
	return func(s string) (kgo.Opt, error) {
		n, err := strconv.ParseInt(s, 10, 32)
		return f(T(n)), err
	}
}

func producer[T any](f func(T) kgo.ProducerOpt) func(T) kgo.Opt {
	return func(v T) kgo.Opt { return f(v) }
}
func consumer[T any](f func(T) kgo.ConsumerOpt) func(T) kgo.Opt {
	return func(v T) kgo.Opt { return f(v) }
}
func group[T any](f func(T) kgo.GroupOpt) func(T) kgo.Opt { return func(v T) kgo.Opt { return f(v) } }

// The kgo options --conf knows, by kgo's own names.
var options = map[string]func(string) (kgo.Opt, error){
	"RequestTimeoutOverhead":              duration(kgo.RequestTimeoutOverhead),
	"RetryTimeout":                        duration(kgo.RetryTimeout),
	"RequestRetries":                      integer(kgo.RequestRetries),
	"DialTimeout":                         duration(kgo.DialTimeout),
	"ConnIdleTimeout":                     duration(kgo.ConnIdleTimeout),
	"MetadataMaxAge":                      duration(kgo.MetadataMaxAge),
	"MetadataMinAge":                      duration(kgo.MetadataMinAge),
	"ProduceRequestTimeout":               duration(producer(kgo.ProduceRequestTimeout)),
	"RecordDeliveryTimeout":               duration(producer(kgo.RecordDeliveryTimeout)),
	"ProducerLinger":                      duration(producer(kgo.ProducerLinger)),
	"RecordRetries":                       integer(producer(kgo.RecordRetries)),
	"MaxBufferedRecords":                  integer(producer(kgo.MaxBufferedRecords)),
	"MaxBufferedBytes":                    integer(producer(kgo.MaxBufferedBytes)),
	"MaxProduceRequestsInflightPerBroker": integer(producer(kgo.MaxProduceRequestsInflightPerBroker)),
	"ProducerBatchMaxBytes":               integer(producer(kgo.ProducerBatchMaxBytes)),
	"FetchMaxWait":                        duration(consumer(kgo.FetchMaxWait)),
	"FetchMaxBytes":                       integer(consumer(kgo.FetchMaxBytes)),
	"FetchMaxPartitionBytes":              integer(consumer(kgo.FetchMaxPartitionBytes)),
	"SessionTimeout":                      duration(group(kgo.SessionTimeout)),
	"HeartbeatInterval":                   duration(group(kgo.HeartbeatInterval)),
	"RebalanceTimeout":                    duration(group(kgo.RebalanceTimeout)),
	"MaxVersions": func(s string) (kgo.Opt, error) {
		v := kversion.FromString(s)
		if v == nil {
			return nil, fmt.Errorf("unknown Kafka version %q", s)
		}
		return kgo.MaxVersions(v), nil
	},
}

func confOptions(conf []contract.KV) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	for _, kv := range conf {
		newOpt, ok := options[kv.Key]
		if !ok {
			return nil, fmt.Errorf("--conf %s: franz-go client knows %v", kv.Key, contract.SortedKeys(options))
		}
		opt, err := newOpt(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("--conf %s=%s: %w", kv.Key, kv.Value, err)
		}
		opts = append(opts, opt)
	}
	return opts, nil
}

// newClient is a kgo client of `opts` with the --conf options after them: explicit settings win.
func newClient(seeds []string, clientID string, hook *throttleHook, opts []kgo.Opt, conf []contract.KV) (*kgo.Client, error) {
	more, err := confOptions(conf)
	if err != nil {
		return nil, err
	}
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(clientID), kgo.WithHooks(hook)}
	return kgo.NewClient(append(append(base, opts...), more...)...)
}

var acks = map[string]kgo.Acks{"all": kgo.AllISRAcks(), "1": kgo.LeaderAck(), "0": kgo.NoAck()}

var codecs = map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
	"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}

func isTimeout(err error) bool {
	return errors.Is(err, kerr.RequestTimedOut) || errors.Is(err, kgo.ErrRecordTimeout) || contract.IsTimeout(err)
}

func (franzClient) Produce(a *contract.ProduceArgs, run *contract.ProduceRun) (*contract.Throttles, error) {
	codec, ok := codecs[a.Compression]
	if !ok {
		return nil, fmt.Errorf("--compression %q: want one of %v", a.Compression, contract.SortedKeys(codecs))
	}
	hook := &throttleHook{}
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(a.Topic), kgo.RequiredAcks(acks[a.Acks]), kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(int32(a.BatchBytes)), kgo.ProducerLinger(time.Duration(a.LingerMs) * time.Millisecond),
	}
	if !a.Idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	client, err := newClient(a.Bootstrap, a.ClientID, hook, opts, a.Conf)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	_ = run.Offer(a, func(r contract.Record) error {
		size := len(r.Value)
		client.Produce(context.Background(), &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
			if err != nil {
				run.Failed(size, err, isTimeout(err))
			} else {
				run.Acked(size)
			}
		})
		return nil
	})
	run.Drain()
	return hook.result(), nil
}

func (franzClient) Consume(a *contract.ConsumeArgs, run *contract.ConsumeRun) (*contract.Throttles, error) {
	hook := &throttleHook{}
	opts := []kgo.Opt{
		kgo.ConsumerGroup(a.Group), kgo.ConsumeTopics(a.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	client, err := newClient(a.Bootstrap, a.ClientID, hook, opts, a.Conf)
	if err != nil {
		return nil, err
	}
	ctx, cancel := run.Context(a.Timeout)
	defer cancel()
	for ctx.Err() == nil {
		fetches := client.PollFetches(ctx)
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				run.Error(fmt.Errorf("%s[%d]: %w", topic, partition, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { run.Got(r.Key) })
	}
	// Commit what was read, then leave the group, within a bound of its own.
	done, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := client.CommitUncommittedOffsets(done); err != nil {
		run.Error(err)
	}
	client.Close()
	return hook.result(), nil
}

func main() { contract.Main(franzClient{}) }
