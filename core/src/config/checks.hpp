// Relations between keys (divisibility, context length, features not built yet, the
// parallel layout, batch sizes), checked once every key has been read and typed.
#pragma once

#include "reader.hpp"
#include "triad/core/config/config.hpp"

namespace triad::config_detail {

// Throws UserError on the first problem; fills in what is derived (data-parallel size,
// batch sizes, max_position_embeddings when 0).
void check_config(Config& c, const Given& given, const Locator& loc, int world_size);
// The checks that need no world size (the model, training, data, precision, plugins' names):
// what triad-config from-megatron can check of a job before it knows its world.
void check_config_without_world(Config& c, const Given& given, const Locator& loc);

}  // namespace triad::config_detail
