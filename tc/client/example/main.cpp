// A small program on the Deuteron client library: bank transfers in
// transactions, retried on deadlocks by Run, and an audit by scan.
//
//   deuteron_client_example embedded DIR     (the store in DIR, in process)
//   deuteron_client_example remote HOST:PORT (a `deuteron serve` server)
//
// Prints the total after the transfers and exits 0 when it is unchanged.
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tc/client/client.h"

using deuteron::Status;
using deuteron::client::Client;
using deuteron::client::ScanIterator;
using deuteron::client::ScanOptions;
using deuteron::client::Transaction;

namespace {

constexpr int kAccounts = 10;
constexpr long kInitial = 100;

std::string Account(int i) { return "account/" + std::to_string(i); }

Status Transfer(Client& db, int from, int to, long amount) {
  return db.Run([&](Transaction& t) -> Status {
    auto a = t.Get(Account(from));
    if (!a.ok()) return a.status();
    auto b = t.Get(Account(to));
    if (!b.ok()) return b.status();
    const long av = std::stol(*a), bv = std::stol(*b);
    if (av < amount) return Status::OK();  // nothing to move
    if (Status s = t.Put(Account(from), std::to_string(av - amount)); !s.ok()) return s;
    return t.Put(Account(to), std::to_string(bv + amount));
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s embedded DIR | remote HOST:PORT\n", argv[0]);
    return 2;
  }
  const std::string_view mode = argv[1];
  auto opened = mode == "remote" ? Client::Connect(argv[2]) : Client::OpenEmbedded(argv[2]);
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Client> db = std::move(opened).value();

  Status s = db->Run([](Transaction& t) {
    for (int i = 0; i < kAccounts; ++i) {
      if (Status p = t.Put(Account(i), std::to_string(kInitial)); !p.ok()) return p;
    }
    return Status::OK();
  });
  if (!s.ok()) {
    std::fprintf(stderr, "setup: %s\n", s.ToString().c_str());
    return 1;
  }

  std::vector<std::thread> workers;
  std::vector<int> failures(4, 0);
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) {
        if (!Transfer(*db, (w + i) % kAccounts, (w * 3 + i * 7 + 1) % kAccounts, i % 13).ok()) {
          ++failures[w];
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();

  long total = 0;
  s = db->Run([&](Transaction& t) {
    total = 0;
    ScanOptions range;
    range.lower = "account/";
    range.upper = "account0";  // '0' follows '/'
    ScanIterator it = t.Scan(range);
    for (; it.Valid(); it.Next()) total += std::stol(it.value());
    return it.status();
  });
  if (!s.ok()) {
    std::fprintf(stderr, "audit: %s\n", s.ToString().c_str());
    return 1;
  }
  int failed = 0;
  for (int f : failures) failed += f;
  std::printf("total %ld (expected %ld), %d failed transfers\n", total, kAccounts * kInitial, failed);
  if (Status c = db->Close(); !c.ok()) {
    std::fprintf(stderr, "close: %s\n", c.ToString().c_str());
    return 1;
  }
  return total == kAccounts * kInitial && failed == 0 ? 0 : 1;
}
