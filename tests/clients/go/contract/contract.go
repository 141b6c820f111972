// Package contract is the command line and the JSON report every client program of the test suite
// shares (tests/clients/README.md): `produce` and `consume`, their arguments, the tallies a run
// keeps and the one JSON line it prints last. A client program supplies a Client; Main does the
// rest. It imports nothing but the standard library, so the old Sarama build (GOPATH mode, Debian's
// packages) compiles it too.
package contract

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Drain is how long a producer waits for its outstanding acknowledgements once it stops offering.
const Drain = 60 * time.Second

// MaxErrors bounds the distinct error strings a report carries.
const MaxErrors = 5

// KV is one `--conf key=value`, passed to the client unchanged.
type KV struct{ Key, Value string }

type confList []KV

func (c *confList) String() string { return fmt.Sprint(*c) }

func (c *confList) Set(s string) error {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("--conf wants key=value, got %q", s)
	}
	*c = append(*c, KV{key, value})
	return nil
}

// ProduceArgs is `produce BOOTSTRAP TOPIC CLIENT_ID SECONDS [options]`.
type ProduceArgs struct {
	Bootstrap   []string
	Topic       string
	ClientID    string
	Seconds     float64
	RecordBytes int
	BatchBytes  int
	LingerMs    int
	Acks        string // "all", "1" or "0"
	Compression string // "none", "gzip", "snappy", "lz4" or "zstd"
	MaxRecords  int64  // 0: no limit
	Idempotent  bool
	Conf        []KV
}

// ConsumeArgs is `consume BOOTSTRAP TOPIC CLIENT_ID GROUP COUNT TIMEOUT_SECONDS [options]`.
type ConsumeArgs struct {
	Bootstrap []string
	Topic     string
	ClientID  string
	Group     string
	Count     int64
	Timeout   time.Duration
	Conf      []KV
}

// Client is one client library behind the contract.
type Client interface {
	Name() string
	Version() string
	// Produce offers records through Offer, acknowledges them on the tally, and returns the
	// throttles the library itself recorded (nil where it keeps none).
	Produce(args *ProduceArgs, run *ProduceRun) (*Throttles, error)
	// Consume reads until run.Done() and returns the throttles the library recorded.
	Consume(args *ConsumeArgs, run *ConsumeRun) (*Throttles, error)
}

// Throttles is what a library recorded of the throttle_time_ms it was told (non-zero ones).
type Throttles struct {
	MaxMs   float64
	TotalMs float64
	Count   int64
}

// Add records one throttle of `ms` milliseconds (zero is no throttle and is not recorded).
func (t *Throttles) Add(ms float64) {
	if ms <= 0 {
		return
	}
	if ms > t.MaxMs {
		t.MaxMs = ms
	}
	t.TotalMs += ms
	t.Count++
}

func (t *Throttles) fields() (maxMs, avgMs any) {
	if t == nil {
		return nil, nil
	}
	if t.Count == 0 {
		return 0.0, 0.0
	}
	return t.MaxMs, t.TotalMs / float64(t.Count)
}

// errorLog keeps the first MaxErrors distinct error strings.
type errorLog struct {
	mu   sync.Mutex
	list []string
}

func (e *errorLog) add(msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, seen := range e.list {
		if seen == msg {
			return
		}
	}
	if len(e.list) < MaxErrors {
		e.list = append(e.list, msg)
	}
}

func (e *errorLog) strings() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{}, e.list...)
}

// IsTimeout says whether err is a request timeout as the Go runtime or the text of a library's
// error shows it; clients add their own library's timeout errors.
func IsTimeout(err error) bool {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return true
	}
	text := strings.ToLower(err.Error())
	return strings.Contains(text, "timed out") || strings.Contains(text, "timeout")
}

// ProduceRun is a produce run's tally and its bound on what is outstanding: at most Window bytes of
// records offered but not yet acknowledged or failed, a bound kept by waiting, never by dropping.
type ProduceRun struct {
	mu          sync.Mutex
	room        *sync.Cond
	Window      int
	outstanding int
	sent        int64
	acked       int64
	failed      int64
	timeouts    int64
	errors      errorLog
}

func newProduceRun(window int) *ProduceRun {
	r := &ProduceRun{Window: window}
	r.room = sync.NewCond(&r.mu)
	return r
}

// Record is one record to offer: key "k-<n>" and a value of RecordBytes bytes.
type Record struct {
	N     int64
	Key   []byte
	Value []byte
}

// Offer calls send for each record until SECONDS have passed or MaxRecords were offered, waiting
// for room in the window before each. send hands the record to the library; the library's
// acknowledgement or failure must reach Acked or Failed with the record's size.
func (r *ProduceRun) Offer(args *ProduceArgs, send func(Record) error) error {
	until := time.Now().Add(time.Duration(args.Seconds * float64(time.Second)))
	pad := []byte(strings.Repeat("x", args.RecordBytes))
	for n := int64(0); args.MaxRecords == 0 || n < args.MaxRecords; n++ {
		if !r.waitRoom(args.RecordBytes, until) {
			break
		}
		value := append([]byte(nil), pad...)
		copy(value, fmt.Sprintf("v-%d-", n))
		r.mu.Lock()
		r.outstanding += args.RecordBytes
		r.sent++
		r.mu.Unlock()
		if err := send(Record{N: n, Key: []byte(fmt.Sprintf("k-%d", n)), Value: value}); err != nil {
			r.Failed(args.RecordBytes, err, IsTimeout(err))
		}
	}
	return nil
}

// waitRoom waits until `size` more bytes fit the window; false once `until` has passed.
func (r *ProduceRun) waitRoom(size int, until time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.outstanding > 0 && r.outstanding+size > r.Window {
		if !time.Now().Before(until) {
			return false
		}
		r.waitUntil(until)
	}
	return time.Now().Before(until)
}

// waitUntil waits on the condition, woken at `deadline` at the latest (sync.Cond has no timeout).
func (r *ProduceRun) waitUntil(deadline time.Time) {
	timer := time.AfterFunc(time.Until(deadline), func() {
		r.mu.Lock()
		r.room.Broadcast()
		r.mu.Unlock()
	})
	r.room.Wait()
	timer.Stop()
}

// Acked records one acknowledged record of `size` bytes.
func (r *ProduceRun) Acked(size int) {
	r.mu.Lock()
	r.acked++
	r.outstanding -= size
	r.room.Broadcast()
	r.mu.Unlock()
}

// Failed records one record the library gave up on.
func (r *ProduceRun) Failed(size int, err error, timeout bool) {
	r.errors.add(err.Error())
	r.mu.Lock()
	r.failed++
	if timeout {
		r.timeouts++
	}
	r.outstanding -= size
	r.room.Broadcast()
	r.mu.Unlock()
}

// Drain waits up to the contract's 60 s for every outstanding record; false if some are left.
func (r *ProduceRun) Drain() bool {
	deadline := time.Now().Add(Drain)
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.acked+r.failed < r.sent && time.Now().Before(deadline) {
		r.waitUntil(deadline)
	}
	return r.acked+r.failed >= r.sent
}

func (r *ProduceRun) report() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := r.failed
	errs := r.errors.strings()
	if unsettled := r.sent - r.acked - r.failed; unsettled > 0 {
		failed += unsettled
		errs = append(errs, fmt.Sprintf("%d records neither acknowledged nor failed %s after the offer", unsettled, Drain))
	}
	return map[string]any{"sent": r.sent, "acked": r.acked, "failed": failed, "timeouts": r.timeouts, "errors": errs}
}

// ConsumeRun is a consume run's tally.
type ConsumeRun struct {
	mu       sync.Mutex
	started  time.Time
	first    time.Duration // when the first record came, and when the COUNT-th: for stderr
	enough   time.Duration
	want     int64
	consumed int64
	keys     map[string]struct{}
	errors   errorLog
	done     chan struct{}
	doneOnce sync.Once
}

// Got records one consumed record; the run is done once COUNT records came.
func (c *ConsumeRun) Got(key []byte) {
	c.mu.Lock()
	c.consumed++
	c.keys[string(key)] = struct{}{}
	if c.consumed == 1 {
		c.first = time.Since(c.started)
	}
	enough := c.consumed >= c.want
	if enough && c.enough == 0 {
		c.enough = time.Since(c.started)
	}
	c.mu.Unlock()
	if enough {
		c.doneOnce.Do(func() { close(c.done) })
	}
}

// Error records an error the library reported while consuming.
func (c *ConsumeRun) Error(err error) { c.errors.add(err.Error()) }

// Done is closed once COUNT records were consumed.
func (c *ConsumeRun) Done() <-chan struct{} { return c.done }

// Context ends when COUNT records were consumed or the timeout passed.
func (c *ConsumeRun) Context(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (c *ConsumeRun) report() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(os.Stderr, "consume: first record after %.2fs, all %d after %.2fs, closed after %.2fs\n",
		c.first.Seconds(), c.want, c.enough.Seconds(), time.Since(c.started).Seconds())
	return map[string]any{"consumed": c.consumed, "keys_distinct": len(c.keys), "errors": c.errors.strings()}
}

func parseProduce(rest []string) (*ProduceArgs, error) {
	if len(rest) < 4 {
		return nil, errors.New("produce BOOTSTRAP TOPIC CLIENT_ID SECONDS [options]")
	}
	seconds, err := strconv.ParseFloat(rest[3], 64)
	if err != nil {
		return nil, fmt.Errorf("SECONDS: %w", err)
	}
	a := &ProduceArgs{Bootstrap: strings.Split(rest[0], ","), Topic: rest[1], ClientID: rest[2], Seconds: seconds}
	var conf confList
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	fs.IntVar(&a.RecordBytes, "record-bytes", 1000, "value size")
	fs.IntVar(&a.BatchBytes, "batch-bytes", 16384, "batch size")
	fs.IntVar(&a.LingerMs, "linger-ms", 5, "linger")
	fs.StringVar(&a.Acks, "acks", "all", "all, 1 or 0")
	fs.StringVar(&a.Compression, "compression", "none", "none, gzip, snappy, lz4 or zstd")
	fs.Int64Var(&a.MaxRecords, "max-records", 0, "stop after N records")
	fs.BoolVar(&a.Idempotent, "idempotent", false, "idempotent producer")
	fs.Var(&conf, "conf", "key=value for the client library")
	if err := fs.Parse(rest[4:]); err != nil {
		return nil, err
	}
	if a.Acks != "all" && a.Acks != "1" && a.Acks != "0" {
		return nil, fmt.Errorf("--acks %q: want all, 1 or 0", a.Acks)
	}
	a.Conf = conf
	return a, nil
}

func parseConsume(rest []string) (*ConsumeArgs, error) {
	if len(rest) < 6 {
		return nil, errors.New("consume BOOTSTRAP TOPIC CLIENT_ID GROUP COUNT TIMEOUT_SECONDS [options]")
	}
	count, err := strconv.ParseInt(rest[4], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("COUNT: %w", err)
	}
	timeout, err := strconv.ParseFloat(rest[5], 64)
	if err != nil {
		return nil, fmt.Errorf("TIMEOUT_SECONDS: %w", err)
	}
	a := &ConsumeArgs{Bootstrap: strings.Split(rest[0], ","), Topic: rest[1], ClientID: rest[2], Group: rest[3],
		Count: count, Timeout: time.Duration(timeout * float64(time.Second))}
	var conf confList
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.Var(&conf, "conf", "key=value for the client library")
	if err := fs.Parse(rest[6:]); err != nil {
		return nil, err
	}
	a.Conf = conf
	return a, nil
}

// Window is the bound on outstanding record bytes for a run's batch size: eight batches, enough
// to keep five requests in flight and the next batches filling, small enough that what is left
// when the offer stops drains in about a second at a quota of 100 kB/s.
func Window(batchBytes, recordBytes int) int {
	w := 8 * batchBytes
	if w < recordBytes {
		w = recordBytes
	}
	return w
}

// Main parses os.Args, runs the mode and prints the report; exit status 2 when it cannot run.
func Main(c Client) {
	if len(os.Args) < 2 {
		fail(errors.New("usage: produce ... | consume ..."))
	}
	start := time.Now()
	var report map[string]any
	var throttles *Throttles
	var err error
	switch os.Args[1] {
	case "produce":
		var a *ProduceArgs
		if a, err = parseProduce(os.Args[2:]); err != nil {
			fail(err)
		}
		run := newProduceRun(Window(a.BatchBytes, a.RecordBytes))
		throttles, err = c.Produce(a, run)
		report = run.report()
	case "consume":
		var a *ConsumeArgs
		if a, err = parseConsume(os.Args[2:]); err != nil {
			fail(err)
		}
		run := &ConsumeRun{started: start, want: a.Count, keys: map[string]struct{}{}, done: make(chan struct{})}
		if a.Count <= 0 {
			close(run.done)
		}
		throttles, err = c.Consume(a, run)
		report = run.report()
	default:
		fail(fmt.Errorf("unknown mode %q: produce or consume", os.Args[1]))
	}
	if err != nil {
		fail(err)
	}
	report["client"], report["version"] = c.Name(), c.Version()
	report["throttle_ms_max"], report["throttle_ms_avg"] = throttles.fields()
	report["seconds"] = time.Since(start).Seconds()
	line, _ := json.Marshal(report)
	fmt.Println(string(line))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "client cannot run:", err)
	os.Exit(2)
}

// SortedKeys is a small helper for clients that list what --conf keys they know.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
