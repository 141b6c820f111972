// The contract's client for Sarama: IBM's current release from the module proxy (client
// "sarama"), and, built from this same file with its import path rewritten to
// github.com/Shopify/sarama in GOPATH mode against Debian's package, the old 1.22 release
// ("sarama-old"; tests/helpers/go_clients.py). So it uses only what both releases have.
//
// --conf sets any field of sarama.Config by its Go path (Net.ReadTimeout=5s,
// Producer.Retry.Max=0, Version=2.1.0); the protocol version defaults to sarama.MaxVersion, the
// newest the library knows (1.22's default, Kafka 0.8.2, speaks versions Kafka 4 removed).
// Throttles come from the per-broker throttle-time-in-ms histograms of the metrics registry, which
// 1.22 does not keep: null there.
package main

import (
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"kqpclients/contract"
)

// Set by the old build's linker flags (-X main.clientName=sarama-old -X main.libraryVersion=...):
// a GOPATH build carries no module versions.
var (
	clientName     = "sarama"
	libraryVersion = ""
)

const throttleMetric = "throttle-time-in-ms-for-broker-"

type saramaClient struct{}

func (saramaClient) Name() string { return clientName }

func (saramaClient) Version() string {
	if libraryVersion != "" {
		return libraryVersion
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if strings.HasSuffix(dep.Path, "/sarama") {
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "unknown"
}

func newConfig(clientID string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = clientID
	cfg.Version = sarama.MaxVersion
	cfg.MetricRegistry = metrics.NewRegistry()
	return cfg
}

// applyConf sets the --conf settings, after the contract's own: explicit settings win.
func applyConf(cfg *sarama.Config, conf []contract.KV) error {
	for _, kv := range conf {
		if err := setField(reflect.ValueOf(cfg).Elem(), kv.Key, kv.Value); err != nil {
			return fmt.Errorf("--conf %s=%s: %w", kv.Key, kv.Value, err)
		}
	}
	return nil
}

// setField sets the field at dotted `path` of struct `v` from its text.
func setField(v reflect.Value, path, text string) error {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() == reflect.Ptr {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("%s is not a struct", name)
		}
		v = v.FieldByName(name)
		if !v.IsValid() || !v.CanSet() {
			return fmt.Errorf("no settable field %s", name)
		}
	}
	switch field := v.Addr().Interface().(type) {
	case *sarama.KafkaVersion:
		version, err := sarama.ParseKafkaVersion(text)
		*field = version
		return err
	case *time.Duration:
		d, err := time.ParseDuration(text)
		*field = d
		return err
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(text, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("cannot set a %s from text", v.Type())
	}
	return nil
}

// throttles reads the per-broker throttle histograms; nil when the library keeps none.
func throttles(registry metrics.Registry) *contract.Throttles {
	var found *contract.Throttles
	registry.Each(func(name string, metric interface{}) {
		h, ok := metric.(metrics.Histogram)
		if !ok || !strings.HasPrefix(name, throttleMetric) {
			return
		}
		if found == nil {
			found = &contract.Throttles{}
		}
		s := h.Snapshot()
		if float64(s.Max()) > found.MaxMs {
			found.MaxMs = float64(s.Max())
		}
		found.TotalMs += s.Mean() * float64(s.Count())
		found.Count += s.Count()
	})
	if found == nil && strings.HasSuffix(clientName, "-old") {
		return nil
	}
	if found == nil {
		// A current Sarama registers the histogram with each broker; none means no broker was reached.
		return &contract.Throttles{}
	}
	return found
}

func isTimeout(err error) bool {
	return errors.Is(err, sarama.ErrRequestTimedOut) || contract.IsTimeout(err)
}

var acks = map[string]sarama.RequiredAcks{"all": sarama.WaitForAll, "1": sarama.WaitForLocal, "0": sarama.NoResponse}

var codecs = map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD}

func (saramaClient) Produce(a *contract.ProduceArgs, run *contract.ProduceRun) (*contract.Throttles, error) {
	codec, ok := codecs[a.Compression]
	if !ok {
		return nil, fmt.Errorf("--compression %q: want one of %v", a.Compression, contract.SortedKeys(codecs))
	}
	cfg := newConfig(a.ClientID)
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = acks[a.Acks]
	cfg.Producer.Compression = codec
	cfg.Producer.Flush.Bytes = a.BatchBytes
	cfg.Producer.Flush.Frequency = time.Duration(a.LingerMs) * time.Millisecond
	if a.Idempotent {
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
	}
	if err := applyConf(cfg, a.Conf); err != nil {
		return nil, err
	}
	producer, err := sarama.NewAsyncProducer(a.Bootstrap, cfg)
	if err != nil {
		return nil, err
	}
	var settled sync.WaitGroup
	settled.Add(2)
	go func() {
		defer settled.Done()
		for m := range producer.Successes() {
			run.Acked(m.Metadata.(int))
		}
	}()
	go func() {
		defer settled.Done()
		for e := range producer.Errors() {
			run.Failed(e.Msg.Metadata.(int), e.Err, isTimeout(e.Err))
		}
	}()
	_ = run.Offer(a, func(r contract.Record) error {
		producer.Input() <- &sarama.ProducerMessage{Topic: a.Topic, Key: sarama.ByteEncoder(r.Key),
			Value: sarama.ByteEncoder(r.Value), Metadata: len(r.Value)}
		return nil
	})
	run.Drain()
	seen := throttles(cfg.MetricRegistry) // before Close: closing a broker unregisters its metrics
	producer.AsyncClose()
	closed := make(chan struct{})
	go func() { settled.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
	}
	return seen, nil
}

type handler struct{ run *contract.ConsumeRun }

func (handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h handler) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.run.Got(m.Key)
			session.MarkMessage(m, "")
		case <-session.Context().Done():
			return nil
		}
	}
}

func (saramaClient) Consume(a *contract.ConsumeArgs, run *contract.ConsumeRun) (*contract.Throttles, error) {
	cfg := newConfig(a.ClientID)
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Return.Errors = true
	if err := applyConf(cfg, a.Conf); err != nil {
		return nil, err
	}
	group, err := sarama.NewConsumerGroup(a.Bootstrap, a.Group, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := run.Context(a.Timeout)
	defer cancel()
	go func() {
		for err := range group.Errors() {
			// Once the run is over, the partition consumers' fetches cut short by Close report EOF
			// (1.22 does, whatever the broker): the close's, not the run's.
			if ctx.Err() == nil {
				run.Error(err)
			}
		}
	}()
	for ctx.Err() == nil {
		// Consume returns at each rebalance; the loop joins again until done or timed out.
		if err := group.Consume(ctx, []string{a.Topic}, handler{run}); err != nil && ctx.Err() == nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			run.Error(err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	seen := throttles(cfg.MetricRegistry)
	if err := group.Close(); err != nil {
		run.Error(err)
	}
	return seen, nil
}

func main() { contract.Main(saramaClient{}) }
