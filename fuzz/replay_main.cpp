// SPDX-License-Identifier: BSL-1.0
// fuzz/replay_main.cpp: a main() for the fuzz targets without libFuzzer.
//
// What this is: the driver of the corpus replays (ctest
// fuzz_<target>_corpus_replay, label unit). It runs LLVMFuzzerTestOneInput
// once on every regular file named on the command line or found (recursively,
// in sorted order) under a directory named there, so the committed corpus is
// replayed with any compiler, under the sanitizers of the build (the asan
// preset: ASan + UBSan). A failing input aborts inside the target, which
// prints the failed check; this driver prints the file's name first.
//
// Usage: <target>_replay [--min-inputs N] PATH...
// Exits 0 iff every input ran and at least N inputs were found (default 1),
// so a missing or empty corpus directory fails instead of passing vacuously.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

void collect(const fs::path& p, std::vector<fs::path>& out) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    std::vector<fs::path> here;
    for (const auto& entry : fs::recursive_directory_iterator(p, ec)) {
      if (entry.is_regular_file(ec)) here.push_back(entry.path());
    }
    std::sort(here.begin(), here.end());
    out.insert(out.end(), here.begin(), here.end());
  } else if (fs::is_regular_file(p, ec)) {
    out.push_back(p);
  } else {
    std::fprintf(stderr, "replay: %s: no such file or directory\n", p.string().c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_inputs = 1;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--min-inputs" && i + 1 < argc) {
      min_inputs = static_cast<std::size_t>(std::strtoull(argv[++i], nullptr, 10));
    } else if (arg == "-h" || arg == "--help") {
      std::printf("usage: %s [--min-inputs N] PATH...\n", argv[0]);
      return 0;
    } else {
      collect(arg, inputs);
    }
  }
  if (inputs.size() < min_inputs) {
    std::fprintf(stderr, "replay: found %zu inputs, expected at least %zu\n", inputs.size(), min_inputs);
    return 1;
  }
  std::size_t bytes = 0;
  for (const fs::path& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      std::fprintf(stderr, "replay: cannot read %s\n", p.string().c_str());
      return 1;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.string().c_str(), buf.size());
    // A copy of exactly the input's size, so ASan catches a read past its end.
    std::vector<std::uint8_t> data(buf.begin(), buf.end());
    LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size());
    bytes += buf.size();
  }
  std::printf("replay: %zu inputs, %zu bytes, all passed\n", inputs.size(), bytes);
  return 0;
}
