import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { parseRouterOptions, RouterOptionsError } from "../../src/cluster/cluster-router.ts";

test("parseRouterOptions() reads numbers and switches by name", () => {
  assert.deepEqual(parseRouterOptions("sessionSpreadS=0.05, waiveOpeningPulls=true,peerMoveS=0"), { sessionSpreadS: 0.05, waiveOpeningPulls: true, peerMoveS: 0 });
  assert.deepEqual(parseRouterOptions("waiveOpeningPulls=false"), { waiveOpeningPulls: false });
  assert.deepEqual(parseRouterOptions("prefillShortlist=2"), { prefillShortlist: 2 });
});

test("parseRouterOptions() names the bad pair: unknown names, bad numbers, bad switches, no value", () => {
  for (const [text, message] of [
    ["peerTransfer=true", /Unknown router option "peerTransfer"; choose from itlTargetS, .*sessionSpreadS, waiveOpeningPulls/],
    ["sessionSpreadS=-0.1", /Router option sessionSpreadS needs a non-negative number, got "-0.1"/],
    ["memoryFullS=lots", /Router option memoryFullS needs a non-negative number, got "lots"/],
    ["itlTargetS=0", /Router option itlTargetS needs a positive number, got "0"/],
    ["prefillShortlist=2.5", /Router option prefillShortlist needs a whole number ≥ 1, got "2.5"/],
    ["prefillShortlist=0", /Router option prefillShortlist needs a whole number ≥ 1, got "0"/],
    ["waiveOpeningPulls=yes", /Router option waiveOpeningPulls takes true or false, got "yes"/],
    ["sessionSpreadS", /Router option "sessionSpreadS" is not NAME=VALUE/],
    ["sessionSpreadS=", /Router option "sessionSpreadS=" is not NAME=VALUE/],
  ] as const) {
    assert.throws(() => parseRouterOptions(text), (e: unknown) => e instanceof RouterOptionsError && message.test(e.message));
  }
});
