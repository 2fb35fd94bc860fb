// An app written with the Vercel AI SDK (the `ai` package) under the OpenTelemetry
// Node SDK: generateText and streamText turns with telemetry on and the conversation in
// its metadata (sessionId), and an agent run with tools. The OTLP/HTTP exporter sends
// each span to a sink (a simple span processor: one request per span).
//   node vercel_app.mjs SINK_URL MODEL_URL PLAN_JSON
import { NodeSDK } from '@opentelemetry/sdk-node';
import { SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';

const [, , sinkUrl, modelUrl, planJson] = process.argv;
const plan = JSON.parse(planJson);
const sdk = new NodeSDK({
  resource: resourceFromAttributes({ 'service.name': plan.service, 'service.version': plan.version }),
  spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: sinkUrl }))],
});
sdk.start();
const provider = createOpenAICompatible({ name: 'stand-in', baseURL: modelUrl, apiKey: 'sk-app-test' });
const telemetry = (conversation) => ({
  isEnabled: true, functionId: 'chat', metadata: { sessionId: conversation, userId: 'user-7' },
});

for (const [index, turn] of plan.turns.entries()) {
  const call = { model: provider(turn.model), prompt: turn.user,
                 experimental_telemetry: telemetry(turn.conversation) };
  if (index % 2 === 0) {
    await generateText(call);
  } else {
    await streamText(call).text;  // every other turn streamed: ai.streamText.doStream
  }
}
for (const run of plan.runs) {
  const tools = Object.fromEntries(Object.entries(run.tools).map(([name, example]) => [name, tool({
    description: name,
    inputSchema: z.object(Object.fromEntries(Object.keys(example).map((k) => [k, z.string()]))),
    execute: async () => run.results[name],
  })]));
  await generateText({ model: provider(run.model), prompt: run.user, tools,
                       stopWhen: stepCountIs(6),
                       experimental_telemetry: { ...telemetry(run.conversation), functionId: 'mail-assistant' } });
}
await sdk.shutdown();
