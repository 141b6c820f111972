// The contract's client for kafkajs (tests/clients/README.md), client "kafkajs".
//
// kafkajs has no accumulator: each producer.send() is one Produce request per leader. So this
// program batches itself: records go into a batch until it holds --batch-bytes or --linger-ms have
// passed, then one send() carries it; sends overlap, at most 8 batches' worth of records
// outstanding (the Go clients' bound), waiting for room, never dropping.
//
// --conf PATH=VALUE sets kafkajs options by where they go: client.* (the Kafka constructor:
// client.requestTimeout=5000, client.retry.retries=0), producer.*, consumer.* (the producer() and
// consumer() options) and send.* (each send(): send.timeout=5000); VALUE is read as JSON when it
// parses, else as a string. kafkajs emits no instrumentation event carrying throttle_time_ms; it
// logs each client-side throttle (KIP-219, "Client side throttling in effect for N ms") at debug
// level, so the log creator below reads the throttles from there.
'use strict'

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')
const { version } = require('kafkajs/package.json')

const MAX_ERRORS = 5
const DRAIN_MS = 60000
const THROTTLE_LOG = /^Client side throttling in effect for (\d+)ms/

function fail (message) {
  process.stderr.write(`client cannot run: ${message}\n`)
  process.exit(2)
}

function parse (argv) {
  const [mode, ...rest] = argv
  const positional = []
  const options = { conf: [] }
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]
    if (!arg.startsWith('--')) {
      positional.push(arg)
      continue
    }
    const name = arg.slice(2)
    if (name === 'idempotent') {
      options.idempotent = true
      continue
    }
    if (i + 1 >= rest.length) fail(`${arg} needs a value`)
    const value = rest[++i]
    if (name === 'conf') options.conf.push(value)
    else options[name] = value
  }
  return { mode, positional, options }
}

function settings (conf) {
  const out = { client: {}, producer: {}, consumer: {}, send: {} }
  for (const item of conf) {
    const eq = item.indexOf('=')
    if (eq < 1) fail(`--conf wants key=value, got ${item}`)
    const path = item.slice(0, eq).split('.')
    const raw = item.slice(eq + 1)
    if (!(path[0] in out) || path.length < 2) fail(`--conf ${item}: the key starts with client., producer., consumer. or send.`)
    let value = raw
    try { value = JSON.parse(raw) } catch (e) { /* a plain string */ }
    let target = out[path[0]]
    for (const key of path.slice(1, -1)) target = target[key] = target[key] || {}
    target[path[path.length - 1]] = value
  }
  return out
}

class Throttles {
  constructor () { this.max = 0; this.total = 0; this.count = 0 }
  add (ms) {
    if (ms <= 0) return
    this.max = Math.max(this.max, ms)
    this.total += ms
    this.count++
  }
}

class Errors {
  constructor () { this.list = [] }
  add (error) {
    const text = String(error && error.message ? `${error.name}: ${error.message}` : error)
    if (!this.list.includes(text) && this.list.length < MAX_ERRORS) this.list.push(text)
  }
}

function isTimeout (error) {
  for (let e = error; e; e = e.cause || e.originalError) {
    if (e.name === 'KafkaJSRequestTimeoutError' || /timed? ?out/i.test(String(e.message))) return true
  }
  return false
}

function kafka (bootstrap, clientId, conf, throttles) {
  const logCreator = () => ({ level, log }) => {
    const found = THROTTLE_LOG.exec(log.message)
    if (found) throttles.add(Number(found[1]))
    else if (level <= logLevel.WARN) process.stderr.write(`${JSON.stringify(log)}\n`)
  }
  return new Kafka({ brokers: bootstrap.split(','), clientId, logLevel: logLevel.DEBUG, logCreator, ...conf.client })
}

const ACKS = { all: -1, 1: 1, 0: 0 }
const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

function report (fields, throttles, started) {
  const nulls = throttles === null
  return {
    client: 'kafkajs',
    version,
    ...fields,
    throttle_ms_max: nulls ? null : throttles.max,
    throttle_ms_avg: nulls ? null : (throttles.count ? throttles.total / throttles.count : 0),
    seconds: (Date.now() - started) / 1000
  }
}

async function produce ([bootstrap, topic, clientId, seconds], options, conf, started) {
  const recordBytes = Number(options['record-bytes'] || 1000)
  const batchBytes = Number(options['batch-bytes'] || 16384)
  const lingerMs = Number(options['linger-ms'] || 5)
  const maxRecords = Number(options['max-records'] || 0)
  const acks = ACKS[options.acks || 'all']
  const compression = CODECS[options.compression || 'none']
  if (acks === undefined) fail(`--acks ${options.acks}: want all, 1 or 0`)
  if (compression === undefined) fail(`--compression ${options.compression}: want one of ${Object.keys(CODECS)}`)
  const window = Math.max(8 * batchBytes, recordBytes)
  const throttles = new Throttles()
  const errors = new Errors()
  const client = kafka(bootstrap, clientId, conf, throttles)
  const idempotent = Boolean(options.idempotent)
  const producer = client.producer({ idempotent, ...(idempotent ? { maxInFlightRequests: 1 } : {}), ...conf.producer })
  await producer.connect()

  const tally = { sent: 0, acked: 0, failed: 0, timeouts: 0 }
  let outstanding = 0
  let wake = null
  const settled = () => { if (wake) { const w = wake; wake = null; w() } }
  const pad = 'x'.repeat(recordBytes)
  const until = Date.now() + Number(seconds) * 1000
  let batch = []
  let batchSize = 0
  let batchStarted = 0

  const flush = () => {
    if (!batch.length) return
    const messages = batch
    const size = batchSize
    batch = []
    batchSize = 0
    producer.send({ topic, messages, acks, compression, ...conf.send }).then(
      () => { tally.acked += messages.length },
      (error) => {
        tally.failed += messages.length
        if (isTimeout(error)) tally.timeouts += messages.length
        errors.add(error)
      }
    ).finally(() => { outstanding -= size; settled() })
  }
  const waitSettled = (ms) => new Promise(resolve => {
    const timer = setTimeout(() => { wake = null; resolve() }, Math.max(0, ms))
    wake = () => { clearTimeout(timer); resolve() }
  })

  for (let n = 0; !maxRecords || n < maxRecords; n++) {
    // Room for one more record: waiting out the linger flushes a partial batch meanwhile.
    while (outstanding > 0 && outstanding + recordBytes > window && Date.now() < until) {
      if (batch.length) flush()
      await waitSettled(Math.min(lingerMs || 1, until - Date.now()))
    }
    if (Date.now() >= until) break
    const head = `v-${n}-`
    batch.push({ key: `k-${n}`, value: head + pad.slice(head.length) })
    if (batch.length === 1) batchStarted = Date.now()
    batchSize += recordBytes
    outstanding += recordBytes
    tally.sent++
    if (batchSize >= batchBytes || Date.now() - batchStarted >= lingerMs) flush()
    // Let the sends' callbacks run now and then: a tight loop would starve them.
    if (n % 64 === 63) await new Promise(resolve => setImmediate(resolve))
  }
  flush()
  const drainUntil = Date.now() + DRAIN_MS
  while (tally.acked + tally.failed < tally.sent && Date.now() < drainUntil) await waitSettled(drainUntil - Date.now())
  const unsettled = tally.sent - tally.acked - tally.failed
  const errorList = errors.list.slice()
  if (unsettled > 0) errorList.push(`${unsettled} records neither acknowledged nor failed ${DRAIN_MS / 1000} s after the offer`)
  await producer.disconnect()
  return report({ ...tally, failed: tally.failed + unsettled, errors: errorList }, throttles, started)
}

async function consume ([bootstrap, topic, clientId, group, count, timeoutSeconds], options, conf, started) {
  const want = Number(count)
  const throttles = new Throttles()
  const errors = new Errors()
  const client = kafka(bootstrap, clientId, conf, throttles)
  const consumer = client.consumer({ groupId: group, ...conf.consumer })
  const keys = new Set()
  let consumed = 0
  let finish
  const done = new Promise(resolve => { finish = resolve })
  const timer = setTimeout(finish, Number(timeoutSeconds) * 1000)
  consumer.on(consumer.events.CRASH, ({ payload }) => errors.add(payload.error))
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  if (want <= 0) finish()
  await consumer.run({
    eachMessage: async ({ message }) => {
      consumed++
      keys.add(message.key === null ? null : message.key.toString())
      if (consumed >= want) finish()
    }
  })
  await done
  clearTimeout(timer)
  await consumer.disconnect()
  return report({ consumed, keys_distinct: keys.size, errors: errors.list }, throttles, started)
}

async function main () {
  const { mode, positional, options } = parse(process.argv.slice(2))
  const conf = settings(options.conf)
  const started = Date.now()
  let result
  if (mode === 'produce') {
    if (positional.length < 4) fail('produce BOOTSTRAP TOPIC CLIENT_ID SECONDS [options]')
    result = await produce(positional, options, conf, started)
  } else if (mode === 'consume') {
    if (positional.length < 6) fail('consume BOOTSTRAP TOPIC CLIENT_ID GROUP COUNT TIMEOUT_SECONDS [options]')
    result = await consume(positional, options, conf, started)
  } else {
    fail(`unknown mode ${mode}: produce or consume`)
  }
  process.stdout.write(`${JSON.stringify(result)}\n`)
  process.exit(0)
}

main().catch(error => fail(error && error.stack ? error.stack : error))
