// Test helper for the Python interop check of indexed datasets (indexed_interop.py).
//   indexed_probe read PREFIX                  prints the dataset as JSON: dtype, sequences,
//                                              document index
//   indexed_probe write PREFIX DTYPE           writes the documents of a JSON list read from
//                                              stdin (each a list of sequences, each a list of
//                                              ids) with IndexedDatasetWriter
//   indexed_probe indices PREFIX T SEED SHUFFLE NUM_SAMPLES
//                                              prints the document, sample and shuffle indices
//                                              of a run of NUM_SAMPLES samples as JSON
//   indexed_probe footprint PREFIX T SEED NUM_SAMPLES
//                                              builds the shuffled indices of a run of
//                                              NUM_SAMPLES samples and prints their bytes and
//                                              the process's peak RSS as JSON
//   indexed_probe samples T SEED SHUFFLE COUNT PATH...
//                                              prints the first COUNT samples (T+1 tokens
//                                              each) of data.kind indexed with data.path PATH,
//                                              or the list PATH... when there are several
// Exit 2 with the message on a UserError.
#include <sys/resource.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/gpt_samples.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/data/indexed_dataset.hpp"
#include "triad/core/error.hpp"

namespace {

triad::IndexedDType dtype_of(const std::string& name) {
  for (uint8_t c = 1; c <= 8; ++c)
    if (triad::dtype_name(c) == name) return static_cast<triad::IndexedDType>(c);
  throw triad::UserError("unknown dtype " + name);
}

int usage() {
  std::cerr << "usage: indexed_probe read PREFIX | write PREFIX DTYPE | indices PREFIX T SEED "
               "SHUFFLE NUM_SAMPLES | footprint PREFIX T SEED NUM_SAMPLES | samples T SEED SHUFFLE "
               "COUNT PATH...\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  try {
    if (mode == "read" && argc == 3) {
      const triad::IndexedDataset ds(argv[2]);
      nlohmann::json seqs = nlohmann::json::array(), docs = nlohmann::json::array();
      for (int64_t i = 0; i < ds.num_sequences(); ++i) seqs.push_back(ds.sequence(i));
      for (int64_t i = 0; i <= ds.num_documents(); ++i) docs.push_back(ds.document_index(i));
      std::cout << nlohmann::json{{"dtype", triad::dtype_name(uint8_t(ds.dtype()))},
                                  {"sequences", seqs},
                                  {"document_index", docs}}
                       .dump()
                << "\n";
      return 0;
    }
    if (mode == "write" && argc == 4) {
      const nlohmann::json in = nlohmann::json::parse(std::cin);
      triad::IndexedDatasetWriter w(argv[2], dtype_of(argv[3]));
      for (const auto& doc : in) {
        std::vector<int32_t> tokens, lengths;
        for (const auto& seq : doc) {
          const auto ids = seq.get<std::vector<int32_t>>();
          tokens.insert(tokens.end(), ids.begin(), ids.end());
          lengths.push_back(static_cast<int32_t>(ids.size()));
        }
        w.add_document(tokens.data(), tokens.size(), lengths);
      }
      w.finish();
      return 0;
    }
    if (mode == "indices" && argc == 7) {
      const triad::IndexedDataset ds(argv[2]);
      const triad::data::GptSamples s(ds, std::atoi(argv[3]), std::string(argv[5]) == "1",
                                      std::strtoull(argv[4], nullptr, 10), 0, -1,
                                      std::atoll(argv[6]));
      const auto& e = s.indices();
      std::cout << nlohmann::json{{"document_index", e.document_index},
                                  {"sample_index", e.sample_index},
                                  {"shuffle_index", e.shuffle_index}}
                       .dump()
                << "\n";
      return 0;
    }
    if (mode == "footprint" && argc == 6) {
      const triad::IndexedDataset ds(argv[2]);
      const triad::data::GptSamples s(ds, std::atoi(argv[3]), true,
                                      std::strtoull(argv[4], nullptr, 10), 0, -1,
                                      std::atoll(argv[5]));
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      std::cout << nlohmann::json{{"samples", s.size()},
                                  {"epochs", s.num_epochs()},
                                  {"index_bytes", s.index_bytes()},
                                  {"peak_rss_bytes", int64_t{usage.ru_maxrss} * 1024}}
                       .dump()
                << "\n";
      return 0;
    }
    if (mode == "samples" && argc >= 7) {
      triad::DataConfig d;
      d.kind = "indexed";
      d.shuffle = std::string(argv[4]) == "1";
      for (int k = 6; k < argc; ++k) d.path_list.push_back(argv[k]);
      if (d.path_list.size() == 1) {
        d.path = d.path_list[0];
        d.path_list.clear();
      }
      triad::ModelConfig m;
      m.seq_length = std::atoi(argv[2]);
      m.vocab_size = 1 << 30;
      // The run draws `count` samples: Megatron's indices span the epochs they need.
      auto loader = triad::make_data_loader(d, m, 1, 1, std::strtoull(argv[3], nullptr, 10), 0, 1,
                                            triad::DataPart::train, std::atoll(argv[5]));
      const int T = m.seq_length;
      std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
      nlohmann::json out = nlohmann::json::array();
      for (int64_t n = 0; n < std::atoll(argv[5]); ++n) {
        loader->micro_batch(n, 0, in.data(), tg.data());
        std::vector<int32_t> sample(in);
        sample.push_back(tg.back());
        out.push_back(sample);
      }
      std::cout << out.dump() << "\n";
      return 0;
    }
    return usage();
  } catch (const triad::UserError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
