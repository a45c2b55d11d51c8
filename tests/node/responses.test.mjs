// The official `openai` Node SDK's Responses API against `rein serve`: `responses.create` whole
// and streamed, `responses.stream` (the SDK's accumulating helper), function tools and the tool
// output sent back statelessly, structured output with `responses.parse` and a zod schema, each
// served by an OpenAI-format, an Anthropic-format and a Bedrock-format tier; a fallback from
// Anthropic's API to the same model on Bedrock, whole and streamed; `previous_response_id`
// refused as a 400 naming the field; a stream that breaks mid-answer ending in `response.failed`.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";

import { assertSimAnswer, startRein } from "./rein.mjs";

const TOOLS = [
  {
    type: "function",
    name: "lookup_order",
    description: "Look an order up by its id.",
    parameters: {
      type: "object",
      properties: { order_id: { type: "string", description: "The order number." } },
      required: ["order_id"],
    },
    strict: false,
  },
];

const Order = z.object({ order_id: z.string(), items: z.number().int(), shipped: z.boolean() });

let rein;
before(async () => {
  rein = await startRein();
});
after(async () => {
  await rein?.stop();
});

for (const route of ["openai", "anthropic", "bedrock"]) {
  describe(`served by the ${route} tier`, () => {
    test("responses.create", async () => {
      const response = await rein.client.responses.create({
        model: route,
        instructions: "Be brief.",
        input: "where is my order?",
        store: false,
      });
      assert.equal(response.object, "response");
      assert.ok(response.id.startsWith("resp_"), response.id);
      assert.equal(response.status, "completed");
      assert.equal(response.instructions, "Be brief.");
      assertSimAnswer(assert, response.output_text);
      assert.equal(response.usage.total_tokens, response.usage.input_tokens + response.usage.output_tokens);
    });

    test("responses.create with stream: true", async () => {
      const stream = await rein.client.responses.create({ model: route, input: "where is my order?", stream: true });
      const events = [];
      for await (const event of stream) events.push(event);
      const types = events.map((event) => event.type);
      assert.deepEqual(types.slice(0, 2), ["response.created", "response.in_progress"]);
      assert.equal(types.at(-1), "response.completed");
      assert.deepEqual(
        events.map((event) => event.sequence_number),
        events.map((_, i) => i),
      );
      const text = events
        .filter((event) => event.type === "response.output_text.delta")
        .map((event) => event.delta)
        .join("");
      assertSimAnswer(assert, text);
      assert.equal(events.at(-1).response.output_text ?? outputText(events.at(-1).response), text);
    });

    test("responses.stream", async () => {
      const stream = rein.client.responses.stream({ model: route, input: "where is my order?" });
      const deltas = [];
      stream.on("response.output_text.delta", (event) => deltas.push(event.delta));
      const final = await stream.finalResponse();
      assert.equal(final.status, "completed");
      assertSimAnswer(assert, final.output_text);
      assert.equal(deltas.join(""), final.output_text);
    });

    test("a function call and its output round trip", async () => {
      const first = await rein.client.responses.create({
        model: route,
        input: "where is my order?",
        tools: TOOLS,
        tool_choice: "required",
      });
      const calls = first.output.filter((item) => item.type === "function_call");
      assert.equal(calls.length, 1, JSON.stringify(first.output));
      const [call] = calls;
      assert.equal(call.name, "lookup_order");
      assert.equal(typeof JSON.parse(call.arguments).order_id, "string");
      const second = await rein.client.responses.create({
        model: route,
        tools: TOOLS,
        input: [
          { role: "user", content: "where is my order?" },
          { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
          { type: "function_call_output", call_id: call.call_id, output: '{"status": "shipped"}' },
        ],
      });
      assertSimAnswer(assert, second.output_text);
    });

    test("a streamed function call", async () => {
      const stream = rein.client.responses.stream({
        model: route,
        input: "where is my order?",
        tools: TOOLS,
        tool_choice: "required",
      });
      const types = [];
      for await (const event of stream) types.push(event.type);
      const final = await stream.finalResponse();
      assert.ok(types.includes("response.function_call_arguments.delta"), types.join(","));
      const [call] = final.output.filter((item) => item.type === "function_call");
      assert.equal(typeof JSON.parse(call.arguments).order_id, "string");
    });

    test("responses.parse with a zod schema", async () => {
      const response = await rein.client.responses.parse({
        model: route,
        input: "where is my order?",
        text: { format: zodTextFormat(Order, "order") },
      });
      const order = response.output_parsed;
      assert.ok(order, JSON.stringify(response.output));
      assert.equal(typeof order.order_id, "string");
      assert.ok(order.order_id.length > 0);
      assert.ok(Number.isInteger(order.items));
      assert.equal(typeof order.shipped, "boolean");
    });

    test("responses.stream with a zod schema", async () => {
      const stream = rein.client.responses.stream({
        model: route,
        input: "where is my order?",
        text: { format: zodTextFormat(Order, "order") },
      });
      const final = await stream.finalResponse();
      assert.equal(final.status, "completed");
      assert.equal(typeof final.output_parsed.order_id, "string");
    });
  });
}

describe("a fallback from Anthropic's API to the same model on Bedrock", () => {
  test("whole", async () => {
    const { data, response } = await rein.client.responses
      .create({ model: "fb-bedrock", input: "where is my order?" })
      .withResponse();
    assert.equal(response.headers.get("x-rein-outcome"), "fallback");
    assert.equal(response.headers.get("x-rein-tier"), "bedrock");
    assertSimAnswer(assert, data.output_text);
  });

  test("streamed", async () => {
    const stream = rein.client.responses.stream({ model: "fb-bedrock", input: "where is my order?" });
    const final = await stream.finalResponse();
    assert.equal(final.status, "completed");
    assertSimAnswer(assert, final.output_text);
  });
});

test("previous_response_id is refused by name", async () => {
  await assert.rejects(
    rein.client.responses.create({ model: "openai", input: "and then?", previous_response_id: "resp_123" }),
    (error) => {
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.param, "previous_response_id");
      assert.match(error.message, /stateless/);
      return true;
    },
  );
});

test("a broken stream ends in response.failed", async () => {
  const stream = await rein.client.responses.create({ model: "interrupted", input: "where is my order?", stream: true });
  const events = [];
  for await (const event of stream) events.push(event);
  const types = events.map((event) => event.type);
  assert.ok(types.includes("response.output_text.delta"), types.join(","));
  assert.equal(types.at(-1), "response.failed");
  assert.ok(!types.includes("response.completed"));
  assert.equal(events.at(-1).response.status, "failed");
});

function outputText(response) {
  return response.output
    .filter((item) => item.type === "message")
    .flatMap((item) => item.content)
    .filter((part) => part.type === "output_text")
    .map((part) => part.text)
    .join("");
}
