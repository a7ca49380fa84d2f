#include "runtime/engine/event_pump.h"

#include <pthread.h>

#include <utility>

#include "runtime/engine/engine.h"  // RequestStream

namespace kinfer {

EventPump::EventPump() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "kinfer-pump");
    Run();
  });
}

EventPump::~EventPump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void EventPump::Post(std::vector<Event>* batch) {
  if (batch->empty()) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    taken_cv_.wait(lock, [&] { return posted_.empty(); });  // at most one batch waits
    posted_.swap(*batch);  // *batch gets an emptied batch's vector, capacity and all
  }
  work_cv_.notify_one();
}

void EventPump::Run() {
  std::vector<Event> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !posted_.empty(); });
    if (posted_.empty()) break;  // stopping, and everything is pushed
    batch.swap(posted_);
    lock.unlock();
    taken_cv_.notify_one();
    for (Event& e : batch) e.stream->Push(std::move(e.event));
    batch.clear();
    lock.lock();
  }
}

}  // namespace kinfer
