// bench.mjs - one Node agent stack doing luagent's benchmark task (bench/bench_react.c):
// a 10-turn ReAct task, 9 rounds of the model calling a trivial `echo` tool and a final
// answer, streamed (SSE) from tests/mock_llm.py serving the task with "by_turn": true.
//
// Usage: node bench.mjs STACK BASE_URL MODE [REPS]
//   STACK  openai     the official `openai` SDK, a hand-written tool loop (thinnest peer)
//          ai-sdk     Vercel AI SDK: streamText + tool() + stopWhen: stepCountIs(10)
//          langgraph  LangChain JS: ChatOpenAI (streaming) + LangGraph createReactAgent
//          raw-node   no framework: fetch() replays the 10 request bodies luagent sent
//                     (the first 10 lines of the mock's log, RAW_LOG=FILE), reading the
//                     streams and nothing else: the Node floor
//   MODE   load       import the stack and build the agent, then exit (start-up cost)
//          once       one task, then exit (peak RSS of a whole run)
//          warm       2 warm-up tasks, then REPS tasks in this process; prints
//                     {"task_ms": [...], "cpu_ms": [...]} (wall and CPU of each task) as JSON
// Every task is checked: exactly 10 model turns, 9 tool runs, the answer mentions 42.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

const [stack, baseURL, mode = 'warm', repsArg = '20'] = process.argv.slice(2);
const TURNS = 10;
const PROMPT = 'Do the ten steps.';
const SYSTEM = 'You are a helpful agent. Use tools when they help.';
const ECHO_DESC = 'Returns its arguments unchanged (diagnostics and tests).';

function check(turns, tools, text) {
  if (turns !== TURNS || tools !== TURNS - 1 || !String(text).includes('42'))
    throw new Error(`${stack}: task went wrong: ${turns} turns, ${tools} tool runs, answer ${JSON.stringify(text)}`);
}

async function makeOpenAI() {
  const { default: OpenAI } = await import('openai');
  const client = new OpenAI({ baseURL, apiKey: 'bench', maxRetries: 0 });
  const tools = [{ type: 'function', function: { name: 'echo', description: ECHO_DESC,
    parameters: { type: 'object' } } }];
  const echo = (args) => JSON.stringify(args);
  return async function task() {
    const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: PROMPT }];
    let turns = 0, runs = 0;
    for (;;) {
      turns++;
      const stream = await client.chat.completions.create({ model: 'm', messages, tools,
        stream: true, stream_options: { include_usage: true } });
      let text = '';
      const calls = [];
      for await (const chunk of stream) {
        const d = chunk.choices[0]?.delta;
        if (!d) continue;
        if (d.content) text += d.content;
        for (const tc of d.tool_calls ?? []) {
          const c = (calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (tc.id) c.id = tc.id;
          if (tc.function?.name) c.function.name += tc.function.name;
          if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
        }
      }
      if (!calls.length) return check(turns, runs, text);
      messages.push({ role: 'assistant', content: text || null, tool_calls: calls });
      for (const c of calls) {
        let out;
        try {
          out = c.function.name === 'echo' ? echo(JSON.parse(c.function.arguments || '{}')) : 'unknown tool';
        } catch (e) {
          out = 'bad arguments: ' + e.message;
        }
        runs++;
        messages.push({ role: 'tool', tool_call_id: c.id, content: out });
      }
      if (turns >= TURNS) return check(turns, runs, text);
    }
  };
}

async function makeAiSdk() {
  const { streamText, tool, stepCountIs } = await import('ai');
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { z } = await import('zod');
  const model = createOpenAI({ baseURL, apiKey: 'bench' }).chat('m');
  let runs = 0;
  const tools = { echo: tool({ description: ECHO_DESC,
    inputSchema: z.object({ step: z.number(), note: z.string() }),
    execute: async (args) => { runs++; return args; } }) };
  return async function task() {
    runs = 0;
    const r = streamText({ model, system: SYSTEM, prompt: PROMPT, tools, maxRetries: 0,
      stopWhen: stepCountIs(TURNS) });
    let text = '';
    for await (const piece of r.textStream) text += piece;
    const steps = await r.steps;
    check(steps.length, runs, steps[steps.length - 1].text);
  };
}

async function makeLangGraph() {
  const { ChatOpenAI } = await import('@langchain/openai');
  const { createReactAgent } = await import('@langchain/langgraph/prebuilt');
  const { tool } = await import('@langchain/core/tools');
  const { z } = await import('zod');
  let runs = 0;
  const echo = tool(async (args) => { runs++; return JSON.stringify(args); },
    { name: 'echo', description: ECHO_DESC, schema: z.object({ step: z.number(), note: z.string() }) });
  // Streaming as LangGraph documents it: agent.stream(streamMode "messages") makes the
  // model stream token by token. (ChatOpenAI({streaming: true}).invoke would also stream,
  // but then counts tokens with tiktoken ranks it downloads from the internet: it hangs
  // offline, and that is not the cost under test.)
  const llm = new ChatOpenAI({ model: 'm', apiKey: 'bench', maxRetries: 0, configuration: { baseURL } });
  const agent = createReactAgent({ llm, tools: [echo], prompt: SYSTEM });
  return async function task() {
    runs = 0;
    let out;
    const stream = await agent.stream({ messages: [{ role: 'user', content: PROMPT }] },
      { recursionLimit: 2 * TURNS + 5, streamMode: ['messages', 'values'] });
    for await (const [kind, chunk] of stream) if (kind === 'values') out = chunk;
    const ai = out.messages.filter((m) => m.getType() === 'ai');
    check(ai.length, runs, ai[ai.length - 1].content);
  };
}

async function makeRaw() {
  const log = process.env.RAW_LOG;
  if (!log) throw new Error('raw-node needs RAW_LOG=the mock log holding luagent\'s requests');
  const bodies = readFileSync(log, 'utf8').split('\n').filter(Boolean).slice(0, TURNS)
    .map((l) => JSON.stringify(JSON.parse(l).body));
  if (bodies.length !== TURNS) throw new Error(`raw-node: ${log} holds ${bodies.length} requests, need ${TURNS}`);
  const url = baseURL.replace(/\/$/, '') + '/chat/completions';
  return async function task() {
    for (const body of bodies) {
      const res = await fetch(url, { method: 'POST', body,
        headers: { 'content-type': 'application/json', accept: 'text/event-stream' } });
      if (!res.ok) throw new Error(`raw-node: HTTP ${res.status}`);
      for await (const _ of res.body); // read the whole stream, nothing else
    }
  };
}

const makers = { openai: makeOpenAI, 'ai-sdk': makeAiSdk, langgraph: makeLangGraph, 'raw-node': makeRaw };
if (!makers[stack] || !baseURL) {
  console.error('usage: node bench.mjs openai|ai-sdk|langgraph|raw-node BASE_URL load|once|warm [REPS]');
  process.exit(2);
}
try {
  const task = await makers[stack]();
  if (mode === 'once') await task();
  else if (mode === 'warm') {
    await task(); // two untimed warm-up tasks: steady state, JIT done
    await task();
    const ms = [], cpu = [];
    for (let i = 0; i < Math.max(1, Number(repsArg) || 20); i++) {
      const c0 = process.cpuUsage(), t0 = performance.now();
      await task();
      ms.push(performance.now() - t0);
      const c = process.cpuUsage(c0);
      cpu.push((c.user + c.system) / 1000);
    }
    console.log(JSON.stringify({ stack, task_ms: ms, cpu_ms: cpu }));
  } else if (mode !== 'load') throw new Error('unknown mode ' + mode);
} catch (e) {
  console.error(`${stack}: ${e.stack || e}`);
  process.exit(1);
}
