#include "insitubatch/engine/stage_clock.h"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>

namespace insitubatch::engine {
namespace {

void Pause() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

double Seconds(const WaitTotals& t, WaitStage s) { return t[static_cast<size_t>(s)]; }

// The split rests on token counts over the same interval, so its ratios are exact whatever
// the machine's load does to the interval's length.
TEST(ReadTokenClockTest, SplitsTimeAsTheTokensAreHeld) {
  ReadTokenClock tokens(/*max_inflight=*/4);
  tokens.Asked();
  tokens.Asked();
  tokens.Asked();
  tokens.Answered();  // one in hand, two at the store, one token free
  const ReadTokenClock::Totals t0 = tokens.Now();
  Pause();
  const ReadTokenClock::Totals t1 = tokens.Now();
  const double decode = t1.decode - t0.decode;
  EXPECT_GT(decode, 0);
  EXPECT_NEAR((t1.store_spare - t0.store_spare) / decode, 2.0, 1e-9);
  EXPECT_EQ(t1.store_full, t0.store_full);

  tokens.Asked();  // every token taken: store time is the store's own limit now
  const ReadTokenClock::Totals t2 = tokens.Now();
  Pause();
  const ReadTokenClock::Totals t3 = tokens.Now();
  EXPECT_NEAR((t3.store_full - t2.store_full) / (t3.decode - t2.decode), 3.0, 1e-9);
  EXPECT_EQ(t3.store_spare, t2.store_spare);
}

TEST(ReadTokenClockTest, ThirtyTwoReadsBehindBusyDecodersAreDecodeTime) {
  ReadTokenClock tokens(32);
  for (int i = 0; i < 32; ++i) tokens.Asked();
  for (int i = 0; i < 30; ++i) tokens.Answered();  // a local store answers at once
  const ReadTokenClock::Totals t0 = tokens.Now();
  Pause();
  const ReadTokenClock::Totals t1 = tokens.Now();
  EXPECT_NEAR((t1.decode - t0.decode) / (t1.store_full - t0.store_full), 15.0, 1e-9);
}

double Sum(const WaitTotals& t) { return std::accumulate(t.begin(), t.end(), 0.0); }

TEST(PassClockTest, ChargesOnlyTheConsumersWaitsAndAllOfThem) {
  ReadTokenClock tokens(2);
  PassClock clock(tokens);
  tokens.Asked();
  clock.Set(PassClock::Producer::kOnChunk);
  Pause();  // the producer waits, the consumer does not: nothing to charge
  EXPECT_EQ(Sum(clock.Charged()), 0);
  const auto start = std::chrono::steady_clock::now();
  clock.SetConsumerWaiting(true);
  Pause();  // one of two tokens at the store, none in hand
  clock.Set(PassClock::Scheduler::kParked);
  clock.Set(PassClock::Producer::kOnScheduler);
  Pause();  // admission parked: residency
  clock.SetConsumerWaiting(false);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Pause();
  const WaitTotals t = clock.Charged();
  EXPECT_GE(Seconds(t, WaitStage::kStore), 0.019);
  EXPECT_GE(Seconds(t, WaitStage::kResidency), 0.019);
  EXPECT_NEAR(Sum(t), waited, 1e-3);
}

// A batch that needs a whole block decoded: the consumer waits while the producer gathers
// one batch and then on the next block's decode. Had the gather taken no time, the wait on
// the decode would have been that much longer: it is all decode.
TEST(PassClockTest, AGatherEndingInAChunkWaitIsChargedAsThatWait) {
  ReadTokenClock tokens(2);
  PassClock clock(tokens);
  tokens.Asked();
  tokens.Asked();
  tokens.Answered();
  tokens.Answered();  // both tokens in hand: decoding
  clock.SetConsumerWaiting(true);
  Pause();                                                         // gathering
  EXPECT_GE(Seconds(clock.Charged(), WaitStage::kGather), 0.019);  // so far, as far as anyone knows
  clock.Set(PassClock::Producer::kOnChunk);
  Pause();
  clock.Set(PassClock::Producer::kBusy);  // the chunk is ready
  const WaitTotals t = clock.Charged();
  EXPECT_GE(Seconds(t, WaitStage::kDecode), 0.039);
  EXPECT_LT(Seconds(t, WaitStage::kGather), 0.005);
  EXPECT_NEAR(Sum(t), Seconds(t, WaitStage::kDecode) + Seconds(t, WaitStage::kGather), 1e-9);
}

TEST(PassClockTest, GathersThatNeverWaitOnChunksAreGather) {
  ReadTokenClock tokens(2);
  PassClock clock(tokens);
  clock.SetConsumerWaiting(true);
  Pause();  // gathering batch after batch of ready chunks
  clock.SetConsumerWaiting(false);
  clock.Set(PassClock::Producer::kOnConsumer);  // the queue filled up: the producer is ahead
  Pause();
  clock.Set(PassClock::Producer::kOnChunk);
  clock.Set(PassClock::Producer::kBusy);
  const WaitTotals t = clock.Charged();
  EXPECT_GE(Seconds(t, WaitStage::kGather), 0.019);
  EXPECT_NEAR(Sum(t), Seconds(t, WaitStage::kGather), 1e-9);
}

TEST(PassClockTest, StoreTimeWithTokensToSpareIsResidencyWhileAdmissionIsParked) {
  ReadTokenClock tokens(32);
  PassClock clock(tokens);
  tokens.Asked();  // one read of a slow store in flight, 31 tokens unused
  clock.Set(PassClock::Producer::kOnChunk);
  clock.Set(PassClock::Scheduler::kParked);
  clock.SetConsumerWaiting(true);
  Pause();
  const WaitTotals parked = clock.Charged();
  EXPECT_GE(Seconds(parked, WaitStage::kResidency), 0.019);
  EXPECT_EQ(Seconds(parked, WaitStage::kStore), 0);
  clock.Set(PassClock::Scheduler::kAdmitting);  // admission is free to go: the store is the wait
  Pause();
  const WaitTotals admitting = clock.Charged();
  EXPECT_GE(Seconds(admitting, WaitStage::kStore), 0.019);
  EXPECT_NEAR(Seconds(admitting, WaitStage::kResidency), Seconds(parked, WaitStage::kResidency), 1e-3);
}

}  // namespace
}  // namespace insitubatch::engine
