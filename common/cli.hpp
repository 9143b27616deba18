// The one CLI contract every stage program and the tour follow (README.md, "Every program takes the same flags").
//
//   problem from flags : --batch --heads --kv-heads --seq-q --seq-k --head-dim --causal --scale --seed
//   variants (any input): --window L,R (sliding window, -1 = unbounded side), --softcap C (> 0)
//   or from files      : --q F --k F --v F   (.npy float32, C order, [B,H,N,d] | [H,N,d] | [N,d])
//   KV cache (stage 05) : --cache-lens X (int32 .npy [B] or "100,0,7"), --page-size P (16 ... 256),
//                        --block-table F (int32 .npy [B, pages_per_seq]; --k/--v then [num_pages,H_kv,P,d])
//   packed batch (CPU): --cu-seqlens-q F --cu-seqlens-k F (int32 .npy [B + 1] each); Q, K, V then
//                        [total, heads, d] (files, or generated from --heads/--kv-heads/--head-dim)
//   neither            : the default input, real Q/K/V of a pretrained transformer (data/)
//   outputs            : --out F (O), --lse F; backward stages --do F --dq F --dk F --dv F
//   report             : human text on stdout, --json for JSON; --no-check skips the comparisons
//   bad input          : one line on stderr, exit code 2, no output file written
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "harness.hpp"
#include "stage.hpp"

namespace fa {

struct CliFlags {
  AttnProblem p;         // from the shape flags (ignored when files are given)
  uint64_t seed = 0;
  std::string q, k, v;   // input files
  std::string out, lse;  // forward outputs
  std::string dO, dq, dk, dv;  // backward input / outputs
  std::string o_in, lse_in;    // backward stages: O and LSE from files instead of the forward
  std::string dtype = "fp32";
  std::string window, softcap;  // --window L,R and --softcap C as typed (apply_variants parses them)
  std::string cache_lens, block_table;  // --cache-lens X, --block-table F as typed (make_inputs reads them)
  int64_t page_size = 0;                // --page-size P
  std::string cu_q, cu_k;               // --cu-seqlens-q F, --cu-seqlens-k F (make_inputs reads them)
  bool json = false;
  bool no_check = false;
  CLI::Option* shape_opts[6] = {};  // to tell whether any shape flag was given
  CLI::Option* scale_opt = nullptr;
  CLI::Option* page_size_opt = nullptr;
};

// Registers the contract's flags on app. `backward` adds --do/--dq/--dk/--dv; `outputs` adds
// --out/--lse (the tour runs several stages and writes no output files).
void add_common_flags(CLI::App& app, CliFlags& f, bool backward, bool outputs = true);

// Sets p's window and softcap from --window L,R and --softcap C (untouched where not given).
// Throws InputError naming the flag: L or R not an integer >= -1, C not a finite number > 0.
void apply_variants(const CliFlags& f, AttnProblem& p);

// Builds the inputs the flags describe: files if --q/--k/--v, random if any shape flag, else the
// default real input; --window and --softcap apply to all three. Throws InputError.
// With --cu-seqlens-q/-k (check_varlen_flags), in.varlen is set: --q/--k/--v are then
// [total_q,H,d] and [total_k,H_kv,d] whose token counts the last offsets must equal, or, without
// files, the inputs are generated in that shape from --heads, --kv-heads, --head-dim and --seed.
// With the KV cache flags, in.cache is set and validated (validate_kv_cache):
//   --cache-lens X   the lengths, from an int32 .npy of B entries (a name ending in .npy) or a
//                    comma list ("100,0,1,4096")
//   --page-size P    alone: the contiguous inputs laid out in P-key pages (make_paged, from --seed)
//   --block-table F  with --page-size: the table from an int32 .npy [B, pages_per_seq], and N_k =
//                    pages_per_seq P; --k/--v files are then the pages [num_pages,H_kv,P,d], and
//                    generated inputs are made in that shape (num_pages: the largest page read + 1)
Inputs make_inputs(const CliFlags& f);

// The checks of the KV cache flags that need no input (run before a large input is made): the
// lengths, the page size and the table read and checked, and against the problem where the shape
// flags give it. Throws InputError naming the flag.
void check_cache_flags(const CliFlags& f);

// The packed-batch flags (--cu-seqlens-q, --cu-seqlens-k, varlen.hpp), checked before any input is
// made: both or neither; each an int32 .npy of rank 1 and B + 1 >= 2 entries, cu[0] = 0,
// non-decreasing, both of one length and at least one token; --batch, if given, equal to B;
// --seq-q, --seq-k refused (each sequence's lengths are in the offsets); no KV cache flag, no
// --o-in/--lse-in. Returns the offsets (empty when neither flag is given). Throws InputError
// naming the flag.
VarlenHost check_varlen_flags(const CliFlags& f);
// The first packed-batch flag given ("--cu-seqlens-q", "--cu-seqlens-k"), "" if none.
std::string varlen_flag_given(const CliFlags& f);
// Throws InputError if a packed-batch flag is given: for the programs that take none (the GPU
// stages, the tour).
void refuse_varlen_flags(const CliFlags& f, const std::string& program);
// The packed batch as a JSON object (B, cu_seqlens_q, cu_seqlens_k, total_q, total_k), for --json.
nlohmann::json varlen_json(const VarlenHost& v);

// The first KV cache flag given ("--cache-lens", "--page-size", "--block-table"), "" if none.
std::string cache_flag_given(const CliFlags& f);
// Throws InputError if a KV cache flag is given: for the programs that take none (every stage but 05).
void refuse_cache_flags(const CliFlags& f);

// The KV cache as a JSON object (lens, page_size, pages_per_seq, num_pages), for --json reports.
nlohmann::json cache_json(const KvCacheHost& c);

// The problem the shape flags give (validated), before any input is made; empty when the inputs
// come from files or the default input. Throws InputError.
std::optional<AttnProblem> problem_from_flags(const CliFlags& f);

// Throws InputError unless --dtype is one this program supports (CPU stages: fp32).
void check_dtype(const CliFlags& f, const std::string& supported = "fp32");

// Checks that each non-empty output path can be written before anything runs: its folder exists
// and is writable, it is a new or regular file (never a folder, device or symlink), and it differs
// from every input file and every other output. Throws InputError naming the flag.
void check_output_paths(const CliFlags& f);

// Parses argv, runs body(), and turns errors into the contract's behaviour: InputError or a flag
// error -> one line on stderr and exit 2; --help -> usage on stdout and exit 0.
int run_program(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// The whole main() of a stage program: flags, inputs, run, compare, report, outputs.
// extra_flags lets a stage add its own options (e.g. block sizes) before parsing; extra_report
// adds to the report after the run (fields of the --json document, lines of the text report).
int stage_main(int argc, char** argv, const Stage& stage,
               const std::function<void(CLI::App&)>& extra_flags = {},
               const std::function<void(const Inputs&, nlohmann::json&, std::ostream&)>& extra_report = {});

// "never a silent NaN": prints one warning line on stderr if x holds NaN or Inf (for LSE, -inf is
// legitimate: a row that sees no key). Returns whether it warned.
bool warn_nonfinite(const std::string& prog, const char* what, const Tensor& x, bool lse);

// The problem as a JSON object (B, H, H_kv, N_q, N_k, d, causal, scale, window [L, R],
// softcap (0: none)), for --json reports.
nlohmann::json problem_json(const AttnProblem& p);

// "3.0 MiB"-style rendering of a byte count.
std::string human_bytes(int64_t bytes);

}  // namespace fa
