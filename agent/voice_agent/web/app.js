// The demo page (docs/web.md): POST /invocations once per mode, read the SSE answer as it arrives, play each PCM
// chunk the moment it lands (Web Audio, back to back), and draw when everything happened. Each mode holds its own
// conversation (a session id per mode); speaking or stopping mid-reply tells the agent how much audio was played,
// and the transcript shows what it keeps. Plain JS, no build step, nothing loaded from outside this app.
'use strict';

(() => {
  const MODES = ['bidi', 'batch'];
  const DEFAULT_RATE = 24000; // the agent's default: PCM s16le mono at 24 kHz
  // Head start for a chunk that begins a stretch of audio (the first one, or the next after the audio ran dry):
  // a start time already in the past still plays, but later than the time we recorded for it.
  const LEAD_S = 0.05;
  const LANES = ['text', 'sentences', 'audio in', 'playing'];

  // ---- SSE: events can be cut anywhere by the transport, so act on complete ones only ----------------------------

  // One event block ("data: ..." lines up to a blank line) → its data, or null (comments, no data field).
  function parseBlock(block) {
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
    }
    return data.length ? data.join('\n') : null;
  }

  class SSEParser {
    constructor() {
      this.held = ''; // a trailing "\r": maybe the first half of "\r\n", so not a line end yet
      this.text = ''; // normalized to "\n" line ends, not yet ended by a blank line
    }

    // Decoded text in, the data of every event it completes out.
    feed(chunk) {
      let input = this.held + chunk;
      this.held = input.endsWith('\r') ? '\r' : '';
      if (this.held) input = input.slice(0, -1);
      this.text += input.replace(/\r\n?/g, '\n');
      const blocks = this.text.split('\n\n');
      this.text = blocks.pop(); // the unfinished one
      return blocks.map(parseBlock).filter((data) => data !== null);
    }

    // The stream is over: a held "\r" was a line end after all. (An event with no blank line after it is dropped.)
    end() {
      const held = this.held;
      this.held = '';
      return held ? this.feed('\n') : [];
    }
  }

  // ---- PCM: s16le bytes → Float32 samples ------------------------------------------------------------------------

  function base64Bytes(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }

  // Decoded size of a base64 string, without decoding it.
  const base64Size = (b64) => (b64.length / 4) * 3 - b64.match(/=*$/)[0].length;

  class PCMDecoder {
    constructor() {
      this.carry = null; // the odd byte of the last chunk: the first half of a sample that the next chunk ends
    }

    decode(bytes) {
      let buf = bytes;
      if (this.carry !== null) {
        buf = new Uint8Array(bytes.length + 1);
        buf[0] = this.carry;
        buf.set(bytes, 1);
        this.carry = null;
      }
      const n = buf.length >> 1;
      if (buf.length % 2) this.carry = buf[buf.length - 1];
      const view = new DataView(buf.buffer, buf.byteOffset, n * 2);
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = view.getInt16(2 * i, true) / 32768;
      return out;
    }
  }

  // ---- playback: one Player per mode and request -------------------------------------------------------------------

  class Player {
    constructor(ctx, mode) {
      this.ctx = ctx;
      this.mode = mode;
      this.decoder = new PCMDecoder();
      this.gain = ctx.createGain(); // one node to cut this request's audio at once
      this.gain.connect(ctx.destination);
      this.nextTime = null; // where the last scheduled chunk ends (AudioContext seconds)
      this.sources = new Set();
    }

    // Schedule one chunk right where the previous one ends, so the samples join without a gap or a click. Only if
    // that moment has already passed (the stream fell behind playback) does it start later: an underrun, recorded
    // as such, not a gap of ours. Returns the record for window.voiceDemo.scheduled, or null (no whole sample yet).
    push(bytes, event) {
      const samples = this.decoder.decode(bytes);
      if (!samples.length) return null;
      const rate = event.sample_rate || DEFAULT_RATE;
      const buffer = this.ctx.createBuffer(1, samples.length, rate);
      buffer.copyToChannel(samples, 0);
      const now = this.ctx.currentTime;
      const expected = this.nextTime;
      const underrun = expected !== null && expected <= now;
      const startTime = expected === null || underrun ? now + LEAD_S : expected;
      const source = this.ctx.createBufferSource();
      source.buffer = buffer;
      source.connect(this.gain);
      source.onended = () => this.sources.delete(source);
      source.start(startTime);
      this.sources.add(source);
      this.nextTime = startTime + buffer.duration;
      return {
        mode: this.mode,
        seq: event.seq,
        sentence: event.sentence,
        startTime,
        duration: buffer.duration,
        underrun,
        gapMs: underrun ? (startTime - expected) * 1000 : 0,
        scheduledAt: now,
      };
    }

    remainingS() {
      return this.nextTime === null ? 0 : Math.max(0, this.nextTime - this.ctx.currentTime);
    }

    // Silence now: cut the gain node off and stop every source (each leaves `sources` when its `ended` fires, so
    // the test hook `sounding()` shows the stop really took effect).
    stop() {
      this.gain.disconnect();
      for (const source of this.sources) {
        try {
          source.stop();
        } catch {
          // never started: nothing to stop
        }
      }
      this.nextTime = null;
    }
  }

  // ---- state, and the hooks for tests ------------------------------------------------------------------------------

  const demo = {
    state: 'idle', // idle | running | done | stopped | error
    playing: false, // audio scheduled and not yet played out
    // Every chunk handed to Web Audio: {mode, seq, sentence, startTime, duration, underrun, gapMs, scheduledAt}.
    scheduled: [],
    firstAudioMs: {}, // mode → ms from sending the request to receiving the first audio_chunk (this browser's clock)
    runs: {}, // mode → what one request did (see newRun)
    lib: { SSEParser, PCMDecoder, parseBlock, base64Bytes },
    sessionId: newSessionId(), // the conversation's; each mode's is this plus "-bidi" or "-batch"
    // Every turn asked: {mode, prompt, text, spoken, remaining, state}; spoken/remaining once the agent has cut it.
    transcript: [],
    reports: [], // every report of played audio sent: {mode, played_ms}
    // AudioContext seconds now; audio still scheduled ahead; sources not yet ended (stopped ones end at once).
    audioTime: () => (ctx ? ctx.currentTime : 0),
    remainingS: () => (session ? Math.max(0, ...session.players.map((p) => p.remainingS())) : 0),
    sounding: () => (session ? session.players.reduce((n, p) => n + p.sources.size, 0) : 0),
  };
  window.voiceDemo = demo;

  let ctx = null;
  let session = null; // the current Speak: {controller, players, stopped}

  function newSessionId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  const sessionOf = (mode) => `${demo.sessionId}-${mode}`;

  function newRun(mode) {
    return {
      mode,
      status: 'waiting', // waiting | running | done | stopped | error
      t0: 0, // performance.now() when the request was sent
      ctxT0: 0, // ctx.currentTime then: maps scheduled start times onto the timeline
      model: '',
      text: '',
      texts: [], // ms of each text_delta
      sentences: [], // {ms, index}
      audio: [], // ms of each audio_chunk received
      played: [], // the scheduled records
      firstAudioMs: null,
      firstTextMs: null,
      firstSentenceMs: null,
      lastTextMs: null,
      endMs: null,
      stopMs: null,
      metrics: null,
      error: null,
      rows: [],
      started: false, // agent_start came: the agent holds this turn, so a cut-short reply is worth reporting
      turn: null, // this run's entry in demo.transcript
      player: null,
    };
  }

  const $ = (selector, root = document) => root.querySelector(selector);
  const sinceT0 = (run) => performance.now() - run.t0;

  function onEvent(run, player, ev) {
    const ms = sinceT0(run);
    addRow(run, ms, ev);
    switch (ev.type) {
      case 'agent_start':
        run.started = true;
        run.model = ev.model || '';
        $('#model').textContent = run.model ? `LLM: ${run.model}.` : '';
        break;
      case 'interrupted':
        applyCut(run.mode, ev, run.turn);
        break;
      case 'text_delta':
        run.texts.push(ms);
        run.text += ev.text;
        run.turn.text = run.text;
        run.firstTextMs ??= ms;
        run.lastTextMs = ms;
        break;
      case 'sentence':
        run.sentences.push({ ms, index: ev.index });
        run.firstSentenceMs ??= ms;
        break;
      case 'audio_chunk': {
        run.audio.push(ms);
        if (run.firstAudioMs === null) {
          run.firstAudioMs = ms;
          demo.firstAudioMs[run.mode] = Math.round(ms);
        }
        if (ev.format && ev.format !== 'pcm') throw new Error(`cannot play ${ev.format} chunks`);
        const record = player.push(base64Bytes(ev.audio), ev);
        if (record) {
          demo.scheduled.push(record);
          run.played.push(record);
        }
        break;
      }
      case 'agent_end':
        run.metrics = ev.metrics || {};
        run.status = 'done';
        run.turn.state = 'done';
        break;
      case 'error':
        run.error = `${ev.code}: ${ev.message}`;
        run.status = 'error';
        run.turn.state = ev.code === 'superseded' ? 'interrupted' : 'error';
        break;
      default:
        if (ev.error) {
          // the AgentCore SDK's own error shape, without a type
          run.error = String(ev.error);
          run.status = 'error';
        }
    }
    redraw();
  }

  // POST one request to the agent; hands the data of each SSE event to `onData` as it completes.
  async function postEvents(body, signal, onData) {
    const response = await fetch('/invocations', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const parser = new SSEParser();
    for (;;) {
      const { value, done } = await reader.read();
      const text = done ? decoder.decode() : decoder.decode(value, { stream: true });
      const datas = parser.feed(text).concat(done ? parser.end() : []);
      for (const data of datas) onData(JSON.parse(data));
      if (done) break;
    }
  }

  async function runMode(mode, payload, current, playedMs) {
    const run = newRun(mode);
    demo.runs[mode] = run;
    const player = new Player(ctx, mode);
    run.player = player;
    current.players.push(player);
    current.controller = new AbortController();
    run.turn = { mode, prompt: payload.prompt, text: '', spoken: null, remaining: null, state: 'speaking' };
    demo.transcript.push(run.turn);
    run.status = 'running';
    run.t0 = performance.now();
    run.ctxT0 = ctx.currentTime;
    setStatus(`${mode}: waiting for the agent …`);
    redraw();
    const body = { ...payload, mode, session_id: sessionOf(mode) };
    if (playedMs !== undefined) body.played_ms = playedMs;
    try {
      await postEvents(body, current.controller.signal, (ev) => {
        onEvent(run, player, ev);
        if (run.firstAudioMs !== null && run.status === 'running') setStatus(`${mode}: playing as it streams …`);
      });
      if (run.status === 'running') throw new Error('the stream ended without agent_end');
    } catch (err) {
      if (current.stopped) {
        run.status = 'stopped';
        if (run.turn.state === 'speaking') run.turn.state = 'interrupted';
      } else {
        run.status = 'error';
        run.error = run.error || String(err && err.message ? err.message : err);
        run.turn.state = 'error';
      }
    }
    run.endMs = sinceT0(run);
    redraw();
    return player;
  }

  // ms of a run's audio played so far: each chunk counts from its start up to now (a gap from running dry does not).
  function heardMs(run) {
    const now = ctx ? ctx.currentTime : 0;
    return run.played.reduce((sum, r) => sum + Math.min(Math.max(now - r.startTime, 0), r.duration), 0) * 1000;
  }

  // The agent's cut of a mode's last turn (an `interrupted` event): the words heard, and those it forgets.
  function applyCut(mode, ev, current) {
    const turns = demo.transcript.filter((t) => t.mode === mode && t !== current);
    const turn = turns[turns.length - 1];
    if (!turn) return;
    turn.spoken = ev.text_spoken;
    turn.remaining = ev.text_remaining;
    turn.state = 'interrupted';
    redraw();
  }

  // Barge-in: silence everything and abort the request under way; returns, per mode whose reply was cut short, how
  // many ms of it were played (to tell the agent, which keeps only the words heard).
  function interrupt() {
    const reports = {};
    if (!session) return reports;
    for (const run of Object.values(demo.runs)) {
      const cutShort = run.status === 'running' || (run.player && run.player.remainingS() > 0);
      if (run.started && cutShort) reports[run.mode] = Math.round(heardMs(run));
    }
    session.stopped = true;
    if (session.controller) session.controller.abort();
    stopAudio();
    for (const run of Object.values(demo.runs)) {
      if (run.status === 'running' || run.status === 'waiting') run.status = 'stopped';
      if (run.status === 'stopped' && run.t0) run.stopMs ??= sinceT0(run);
    }
    return reports;
  }

  // A Stop with no new prompt: the report goes alone, and its answer is the agent's cut.
  async function report(reports) {
    await Promise.all(
      Object.entries(reports).map(async ([mode, played]) => {
        demo.reports.push({ mode, played_ms: played });
        try {
          await postEvents({ session_id: sessionOf(mode), played_ms: played }, undefined, (ev) => {
            if (ev.type === 'interrupted') applyCut(mode, ev, null);
          });
        } catch (err) {
          setStatus(`Stopped, but the agent did not get the report: ${err}`);
        }
      }),
    );
  }

  // Resolves when the player's audio has played out (so modes run in turn can each be heard), or on Stop.
  function played(player, current) {
    return new Promise((resolve) => {
      const check = () => (current.stopped || player.remainingS() <= 0 ? resolve() : setTimeout(check, 100));
      check();
    });
  }

  async function speak(event) {
    event.preventDefault();
    // A new Speak interrupts whatever still streams or plays; the agent hears how much of it was played.
    const reports = interrupt();
    for (const [mode, played] of Object.entries(reports)) demo.reports.push({ mode, played_ms: played });
    // Created on the first click (browsers allow audio after a user gesture), at the stream's rate, so Web Audio
    // resamples the joined stream once at the output instead of each chunk on its own.
    ctx = ctx || new AudioContext({ sampleRate: DEFAULT_RATE, latencyHint: 'interactive' });
    if (ctx.state !== 'running') await ctx.resume();

    const choice = $('input[name=mode]:checked').value;
    const modes = choice === 'both' ? MODES : [choice];
    const payload = { prompt: $('#prompt').value, speed: Number($('#speed').value), format: 'pcm' };
    if ($('#voice').value) payload.voice = $('#voice').value;

    const current = { controller: null, players: [], stopped: false };
    session = current;
    demo.scheduled = [];
    demo.firstAudioMs = {};
    demo.runs = {};
    demo.state = 'running';
    for (const mode of MODES) {
      const column = $(`#col-${mode}`);
      column.hidden = !modes.includes(mode);
      $('tbody', column).replaceChildren();
    }
    $('#columns').classList.toggle('two', modes.length > 1);
    $('#verdict').hidden = true;
    updateButtons();

    $('#conversation').hidden = false;
    for (const [i, mode] of modes.entries()) {
      const player = await runMode(mode, payload, current, reports[mode]);
      if (current.stopped) break;
      if (i < modes.length - 1) {
        setStatus(`${mode}: finishing playback before ${modes[i + 1]} starts …`);
        await played(player, current);
      }
    }
    if (!current.stopped) {
      const failed = modes.filter((mode) => demo.runs[mode].status === 'error');
      demo.state = failed.length ? 'error' : 'done';
      setStatus(failed.length ? `Failed: ${failed.map((m) => `${m}: ${demo.runs[m].error}`).join('; ')}` : 'Done.');
    }
    showVerdict();
    updateButtons();
    redraw();
  }

  function stopAudio() {
    if (!session) return;
    for (const player of session.players) player.stop();
  }

  // Stop: abort the request (the server sees the disconnect and stops the LLM and the TTS session), silence
  // everything scheduled now, then tell the agent how much of each cut-short reply was played.
  function stop() {
    if (!session) return;
    const wasRunning = demo.state === 'running';
    const reports = interrupt();
    demo.state = 'stopped';
    setStatus(wasRunning ? 'Stopped: the request was aborted and the audio cut.' : 'Stopped the audio.');
    updateButtons();
    redraw();
    report(reports).then(redraw);
  }

  function newConversation() {
    interrupt();
    demo.sessionId = newSessionId();
    demo.transcript = [];
    if (demo.state === 'running') demo.state = 'stopped';
    $('#conversation').hidden = true;
    setStatus('A new conversation: the agent remembers nothing said before.');
    updateButtons();
    redraw();
  }

  function updateButtons() {
    const busy = demo.state === 'running';
    $('#speak').textContent = busy || demo.playing ? 'Interrupt and speak' : 'Speak';
    $('#stop').disabled = !(busy || demo.playing);
  }

  function setStatus(text) {
    $('#status').textContent = text;
  }

  function showVerdict() {
    const bidi = demo.runs.bidi;
    const batch = demo.runs.batch;
    const verdict = $('#verdict');
    if (!bidi || !batch || bidi.firstAudioMs === null || batch.firstAudioMs === null) return;
    const ratio = batch.firstAudioMs / bidi.firstAudioMs;
    verdict.textContent =
      `bidi spoke after ${Math.round(bidi.firstAudioMs)} ms, batch after ${Math.round(batch.firstAudioMs)} ms: ` +
      `first audio ${ratio.toFixed(1)}× sooner with bidi.`;
    verdict.hidden = false;
  }

  // ---- drawing -----------------------------------------------------------------------------------------------------

  let drawPending = false;
  function redraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      draw();
    });
  }

  const ms = (value) => (value === null || value === undefined ? '–' : `${Math.round(value)} ms`);
  const playedMs = (run, record) => (record.startTime - run.ctxT0) * 1000;

  function lastMs(run) {
    const ends = run.played.map((r) => playedMs(run, r) + r.duration * 1000);
    return Math.max(run.endMs || 0, run.t0 && run.status === 'running' ? sinceT0(run) : 0, ...ends);
  }

  function draw() {
    drawTranscript();
    const runs = Object.values(demo.runs);
    // One time scale for every column, so the two modes compare at a glance.
    const scale = Math.max(4000, Math.ceil(Math.max(0, ...runs.map(lastMs)) / 1000) * 1000);
    for (const run of runs) drawColumn(run, scale);
  }

  function drawColumn(run, scale) {
    const column = $(`#col-${run.mode}`);
    $('.state', column).textContent = run.status === 'running' ? '· streaming' : `· ${run.status}`;
    column.dataset.status = run.status;
    $('.first-audio .value', column).textContent =
      run.firstAudioMs !== null ? ms(run.firstAudioMs) : run.status === 'running' ? '…' : '–';
    const m = run.metrics || {};
    const underruns = run.played.filter((r) => r.underrun).length;
    const audioS = run.played.reduce((sum, r) => sum + r.duration, 0);
    const figures = [
      ['first sound', run.played.length ? ms(playedMs(run, run.played[0])) : '–'],
      ['agent: first audio', m.first_audio_ms === undefined ? '–' : ms(m.first_audio_ms)],
      ['first text', ms(run.firstTextMs)],
      ['first sentence', ms(run.firstSentenceMs)],
      // The LLM's last fragment; before agent_end (a stop, an error) it is only the last one seen.
      [run.metrics ? 'LLM done' : 'last text', ms(run.lastTextMs)],
      [run.stopMs !== null ? 'stopped at' : 'stream end', ms(run.stopMs ?? run.endMs)],
      ['audio', `${audioS.toFixed(1)} s in ${run.played.length} chunk${run.played.length === 1 ? '' : 's'}`],
      ['underruns', String(underruns)],
    ];
    $('.figures', column).replaceChildren(
      ...figures.flatMap(([label, value]) => [el('dt', label), el('dd', value)]),
    );
    drawTimeline($('.timeline', column), run, scale);
    const reply = $('.reply', column);
    reply.textContent = run.text;
    if (run.error) reply.append(el('span', ` ${run.error}`, 'error'));
  }

  function drawTranscript() {
    const items = demo.transcript.map((turn) => {
      const item = el('li', '');
      item.dataset.mode = turn.mode;
      item.dataset.state = turn.state;
      const asked = el('div', '', 'asked');
      asked.append(el('span', `You (${turn.mode}):`, 'who'), turn.prompt);
      const answer = el('div', '', 'answer');
      answer.append(el('span', 'Agent:', 'who'));
      if (turn.spoken === null) {
        answer.append(el('span', turn.text, 'heard'));
      } else {
        answer.append(el('span', turn.spoken, 'heard'), ' ', el('span', turn.remaining, 'cut'));
      }
      if (turn.state !== 'done') answer.append(el('span', `(${turn.state})`, 'note'));
      item.append(asked, answer);
      return item;
    });
    $('#transcript').replaceChildren(...items);
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function drawTimeline(box, run, scale) {
    const width = Math.max(320, box.clientWidth);
    const label = 74;
    const lane = 24;
    const top = 32; // two rows of marker labels above the lanes
    const height = top + LANES.length * lane + 20;
    const x = (t) => label + ((width - label - 10) * Math.min(Math.max(t, 0), scale)) / scale;
    const y = (i) => top + i * lane;
    const chart = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'chart' });

    LANES.forEach((name, i) => {
      const background = { x: label, y: y(i), width: width - label - 10, height: lane, class: `lane lane-${i % 2}` };
      chart.append(svg('rect', background));
      chart.append(svg('text', { x: label - 6, y: y(i) + lane / 2 + 4, class: 'lane-label' }, name));
    });
    const step = [250, 500, 1000, 2000, 5000, 10000, 20000].find((s) => scale / s <= 8) || 60000;
    for (let t = 0; t <= scale; t += step) {
      chart.append(svg('line', { x1: x(t), x2: x(t), y1: top, y2: y(LANES.length), class: 'grid' }));
      chart.append(svg('text', { x: x(t), y: y(LANES.length) + 14, class: 'axis' }, t ? `${t / 1000} s` : '0'));
    }

    for (const t of run.texts) chart.append(tick(x(t), y(0), lane, 'tick-text'));
    run.sentences.forEach((s, i) => {
      const px = x(s.ms);
      chart.append(svg('circle', { cx: px, cy: y(1) + lane / 2, r: 5, class: 'mark-sentence' }));
      // The index to the right of its dot, or to the left when the next dot is too close for it.
      const crowded = i + 1 < run.sentences.length && x(run.sentences[i + 1].ms) - px < 18;
      const attrs = { x: crowded ? px - 7 : px + 7, y: y(1) + lane / 2 + 4, 'text-anchor': crowded ? 'end' : 'start' };
      chart.append(svg('text', { ...attrs, class: 'mark-label' }, String(s.index)));
    });
    for (const t of run.audio) chart.append(tick(x(t), y(2), lane, 'tick-audio'));
    const bar = (from, to, className) =>
      svg('rect', {
        x: x(from),
        y: y(3) + 5,
        width: Math.max(1, x(to) - x(from)),
        height: lane - 10,
        class: className,
      });
    for (const r of run.played) {
      const start = playedMs(run, r);
      const end = start + r.duration * 1000;
      const cut = run.stopMs ?? Infinity; // what was scheduled after a stop never played: drawn hollow
      if (start < cut) chart.append(bar(start, Math.min(end, cut), `bar-played s${(r.sentence ?? 0) % 2}`));
      if (end > cut) chart.append(bar(Math.max(start, cut), end, 'bar-cut'));
      if (r.underrun) chart.append(tick(x(start), y(3), lane, 'tick-underrun'));
    }
    const bottom = y(LANES.length);
    if (run.firstAudioMs !== null) {
      marker(chart, x(run.firstAudioMs), top - 18, bottom, 'first-audio', `first audio ${ms(run.firstAudioMs)}`);
    }
    if (run.stopMs !== null) marker(chart, x(run.stopMs), top - 4, bottom, 'stop', `stop ${ms(run.stopMs)}`);
    if (demo.playing && run.played.length && ctx) {
      const now = (ctx.currentTime - run.ctxT0) * 1000;
      const end = playedMs(run, run.played[run.played.length - 1]) + run.played[run.played.length - 1].duration * 1000;
      if (now < end) chart.append(svg('line', { x1: x(now), x2: x(now), y1: y(3), y2: y(4), class: 'playhead' }));
    }
    box.replaceChildren(chart);
  }

  function tick(px, top, lane, className) {
    return svg('rect', { x: px - 0.75, y: top + 4, width: 1.5, height: lane - 8, class: className });
  }

  // A dashed line over every lane, labelled at height `labelY` (right of the line, or left near the end).
  function marker(chart, px, labelY, bottom, className, text) {
    chart.append(svg('line', { x1: px, x2: px, y1: labelY - 10, y2: bottom, class: `marker ${className}` }));
    const anchor = px > chart.getAttribute('width') * 0.7 ? 'end' : 'start';
    const attrs = { x: anchor === 'end' ? px - 4 : px + 4, y: labelY, 'text-anchor': anchor };
    chart.append(svg('text', { ...attrs, class: `marker-label ${className}` }, text));
  }

  function addRow(run, at, ev) {
    let detail = '';
    if (ev.type === 'text_delta' || ev.type === 'sentence') detail = JSON.stringify(ev.text);
    else if (ev.type === 'audio_chunk') detail = `seq ${ev.seq}, sentence ${ev.sentence}, ${base64Size(ev.audio)} bytes`;
    else if (ev.type === 'sentence_complete') detail = `sentence ${ev.index}, ${ev.audio_ms} ms of audio`;
    else if (ev.type === 'agent_end') detail = JSON.stringify(ev.metrics);
    else if (ev.type === 'error') detail = `${ev.code}: ${ev.message}`;
    else if (ev.type === 'agent_start') detail = `${ev.model}, voice ${ev.voice ?? 'default'}`;
    else if (ev.type === 'words') detail = ev.words.map((w) => `${w.word}@${Math.round(w.start_ms)}`).join(' ');
    else if (ev.type === 'interrupted') detail = `${ev.played_ms} ms played: kept ${JSON.stringify(ev.text_spoken)}`;
    const row = document.createElement('tr');
    const agentMs = ev.t_ms === undefined ? '' : `${ev.t_ms}`;
    row.append(el('td', `${Math.round(at)}`), el('td', agentMs), el('td', ev.type || '?'), el('td', detail));
    $(`#col-${run.mode} tbody`).append(row);
    const count = run.rows.push(ev);
    $(`#col-${run.mode} summary`).textContent = `events (${count}): ms here · agent t_ms · type · detail`;
  }

  // Keeps `playing`, the Stop button and the playhead current while audio plays after the stream ended.
  setInterval(() => {
    const playing = Boolean(session && session.players.some((p) => p.remainingS() > 0));
    if (playing || playing !== demo.playing) {
      demo.playing = playing;
      updateButtons();
      redraw();
    }
  }, 200);

  document.addEventListener('DOMContentLoaded', () => {
    $('#controls').addEventListener('submit', (event) => {
      speak(event).catch((err) => {
        demo.state = 'error';
        setStatus(`Failed: ${err}`);
        updateButtons();
      });
    });
    $('#stop').addEventListener('click', stop);
    $('#new-conversation').addEventListener('click', newConversation);
    const speed = $('#speed');
    speed.addEventListener('input', () => ($('#speed-value').textContent = Number(speed.value).toFixed(2)));
    window.addEventListener('resize', redraw);
  });
})();
