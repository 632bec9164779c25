/** Timing chat requests one at a time against a running server (bench-serve-detach.ts, bench-worker-nats.ts). */

/**
 * Sends each prompt to `url` as a chat request (`model`, `maxTokens` tokens), waiting for each answer
 * before the next; returns each request's milliseconds. A status other than 200 throws, naming `who`.
 */
export async function timeChats(url: string, prompts: readonly string[], who: string, model = "agent-scripted", maxTokens = 16): Promise<number[]> {
  const ms: number[] = [];
  for (const content of prompts) {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content }], max_tokens: maxTokens }),
    });
    if (res.status !== 200) throw new Error(`${who} answered ${res.status}: ${await res.text()}`);
    await res.json();
    ms.push(performance.now() - t0);
  }
  return ms;
}
