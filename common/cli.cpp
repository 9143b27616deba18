#include "cli.hpp"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <algorithm>
#include <vector>

#include "dtype.hpp"
#include "errors.hpp"
#include "npy.hpp"

namespace fa {

void add_common_flags(CLI::App& app, CliFlags& f, bool backward, bool outputs) {
  AttnProblem& p = f.p;
  p.B = 1, p.H = 4, p.H_kv = 0, p.N_q = 256, p.N_k = 0, p.d = 64;  // 0: "same as" (see make_inputs)
  f.shape_opts[0] = app.add_option("--batch", p.B, "batch size B (default 1)");
  f.shape_opts[1] = app.add_option("--heads", p.H, "query heads H (default 4)");
  f.shape_opts[2] = app.add_option("--kv-heads", p.H_kv, "key/value heads H_kv, H % H_kv == 0 (default H)");
  f.shape_opts[3] = app.add_option("--seq-q", p.N_q, "query length N_q (default 256)");
  f.shape_opts[4] = app.add_option("--seq-k", p.N_k, "key length N_k (default N_q)");
  f.shape_opts[5] = app.add_option("--head-dim", p.d, "head dimension d (default 64)");
  app.add_flag("--causal", p.causal, "bottom-right aligned causal mask: query i sees key j iff j <= i + N_k - N_q");
  f.scale_opt = app.add_option("--scale", p.scale, "softmax scale (default 1/sqrt(d))");
  app.add_option("--seed", f.seed, "seed of the random inputs (default 0)");
  app.add_option("--window", f.window,
                 "sliding window L,R: query i sees key j iff i + N_k - N_q - L <= j <= i + N_k - N_q + R "
                 "(-1 = that side unbounded; with --causal, R is 0)");
  app.add_option("--softcap", f.softcap, "softcap C > 0: S = C tanh(S / C) on the scaled scores (Gemma 2)");
  app.add_option("--cache-lens", f.cache_lens,
                 "KV cache (stage 05, kernel v14): sequence b sees its keys 0 .. len[b] - 1 only, the causal diagonal "
                 "aligned to len[b]; an int32 .npy of B lengths (a name ending in .npy) or a comma list, e.g. 100,0,7");
  f.page_size_opt = app.add_option("--page-size", f.page_size,
                                   "KV cache in pages of P keys, 16 ... 256 (alone: the inputs laid out in pages "
                                   "scattered by a random table from --seed)");
  app.add_option("--block-table", f.block_table,
                 "KV cache page table: int32 .npy [B, pages_per_seq], N_k = pages_per_seq P; --k/--v are then "
                 "the pages [num_pages,H_kv,P,d]")
      ->needs(f.page_size_opt);
  app.add_option("--cu-seqlens-q", f.cu_q,
                 "packed variable-length batch (CPU stages; stage 05: v13, auto): query offsets, an int32 .npy [B + 1], cu[0] = 0, "
                 "non-decreasing, cu[B] = total_q; sequence b has queries cu[b] .. cu[b+1] - 1 (0 allowed). Q and O are "
                 "then [total_q,H,d], LSE [H,total_q]; --batch, if given, must be B; --seq-q/--seq-k are refused");
  app.add_option("--cu-seqlens-k", f.cu_k,
                 "packed batch: key offsets, an int32 .npy [B + 1] as --cu-seqlens-q; K and V [total_k,H_kv,d]");
  auto* q = app.add_option("--q", f.q, "Q as .npy (float32, [B,H,N_q,d], [H,N_q,d] or [N_q,d])");
  auto* k = app.add_option("--k", f.k, "K as .npy (float32, [B,H_kv,N_k,d] ...)");
  auto* v = app.add_option("--v", f.v, "V as .npy (float32, shape of K)");
  q->needs(k)->needs(v);
  k->needs(q)->needs(v);
  v->needs(q)->needs(k);
  for (auto* o : f.shape_opts) o->excludes(q)->excludes(k)->excludes(v);
  app.add_option("--dtype", f.dtype, "element type: fp32 (the default; the only one CPU stages take), fp16 or bf16 (GPU stages), fp8 (stage 05: e4m3 with block scales, kernel v15, d = 128, Hopper)");
  if (outputs) {
    app.add_option("--out", f.out, "write O as .npy (float32, [B,H,N_q,d]; a packed batch: [total_q,H,d])");
    app.add_option("--lse", f.lse, "write LSE as .npy (float32, [B,H,N_q], natural log; a packed batch: [H,total_q])");
  }
  if (backward) {
    app.add_option("--do", f.dO, "dO as .npy (shape of Q; default random normal)");
    app.add_option("--dq", f.dq, "write dQ as .npy");
    app.add_option("--dk", f.dk, "write dK as .npy");
    app.add_option("--dv", f.dv, "write dV as .npy");
    auto* oi = app.add_option("--o-in", f.o_in, "take O from a .npy file ([B,H,N_q,d]) instead of running the forward (with --lse-in)");
    auto* li = app.add_option("--lse-in", f.lse_in, "take LSE from a .npy file ([B,H,N_q], natural log, -inf for a row that sees no key)");
    oi->needs(li);
    li->needs(oi);
  }
  app.add_flag("--json", f.json, "print a JSON report instead of text");
  app.add_flag("--no-check", f.no_check, "skip the comparisons with stage 01 and float64");
  // The flags whose empty value means "not given" in the code above: typed empty (--out ""), they
  // would be silently ignored, so they are refused at parse time (exit 2, one line naming the flag).
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("expected a value, found an empty string") : std::string(); }, "NONEMPTY");
  for (const char* name : {"--q", "--k", "--v", "--out", "--lse", "--do", "--dq", "--dk", "--dv", "--o-in", "--lse-in",
                           "--cache-lens", "--block-table", "--cu-seqlens-q", "--cu-seqlens-k", "--window", "--softcap"})
    if (CLI::Option* o = app.get_option_no_throw(name)) o->check(non_empty);
}

void apply_variants(const CliFlags& f, AttnProblem& p) {
  if (!f.window.empty()) {
    // Two integers >= -1, "L,R", nothing else (no spaces, no third number).
    const auto side = [&](const std::string& t, int64_t& out) {
      size_t used = 0;
      try {
        out = std::stoll(t, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      return !t.empty() && used == t.size() && !std::isspace(static_cast<unsigned char>(t[0])) && out >= -1;
    };
    const size_t comma = f.window.find(',');
    int64_t L = 0, R = 0;
    if (comma == std::string::npos || !side(f.window.substr(0, comma), L) || !side(f.window.substr(comma + 1), R))
      throw InputError("--window", "L,R: two integers >= -1 (-1: that side unbounded), e.g. 256,0",
                       "'" + f.window + "'");
    p.window_left = L, p.window_right = R;
  }
  if (!f.softcap.empty()) {
    // As typed, as --scale: 0 means "none" inside AttnProblem, typed it is an error; and a value
    // that rounds to 0 or inf in float32 is reported as written.
    char* end = nullptr;
    const double v = std::strtod(f.softcap.c_str(), &end);
    const float r = static_cast<float>(v);
    if (end == f.softcap.c_str() || *end != '\0' || !(std::isfinite(v) && v > 0) || !(std::isfinite(r) && r > 0.f))
      throw InputError("--softcap", "a finite number > 0 that float32 holds (e.g. 50)", "'" + f.softcap + "'");
    p.softcap = r;
  }
}

std::optional<AttnProblem> problem_from_flags(const CliFlags& f) {
  // --scale as typed: a value that rounds to 0 or inf in float32 is reported as the user wrote it
  // (after rounding it would read "found 0" for 1e-50). And scale 0 means "1/sqrt(d)" inside
  // AttnProblem; typed on the command line it is an error.
  if (f.scale_opt && f.scale_opt->count() > 0) {
    const std::string typed = f.scale_opt->results().empty() ? "" : f.scale_opt->results().back();
    const double v = std::strtod(typed.c_str(), nullptr);
    const float r = static_cast<float>(v);
    if (!(std::isfinite(v) && v > 0) || !(std::isfinite(r) && r > 0.f))
      throw InputError("--scale", "a finite number > 0 that float32 holds (about 1.4e-45 to 3.4e38)", typed);
  }
  AttnProblem variants;  // --window and --softcap are checked whatever the input
  apply_variants(f, variants);
  if (!f.q.empty()) return std::nullopt;
  bool shape_given = false;
  for (auto* o : f.shape_opts) shape_given |= o && o->count() > 0;
  if (!shape_given) return std::nullopt;
  AttnProblem p = f.p;
  // Not given: H_kv = H and N_k = N_q. Given as 0: validate() rejects it.
  if (f.shape_opts[2]->count() == 0) p.H_kv = p.H;
  if (f.shape_opts[4]->count() == 0) p.N_k = p.N_q;
  apply_variants(f, p);
  validate(p);
  return p;
}

namespace {

// --cache-lens X: an int32 .npy of the lengths (a name ending in .npy), else a comma list ("100,0,7").
std::vector<int32_t> read_cache_lens(const std::string& x) {
  if (x.size() < 4 || x.compare(x.size() - 4, 4, ".npy") != 0) {
    std::vector<int32_t> lens;
    size_t at = 0;
    for (;;) {
      const size_t comma = x.find(',', at);
      const std::string t = x.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      int32_t v = 0;
      const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || err != std::errc() || end != t.data() + t.size())
        throw InputError("--cache-lens", "an int32 .npy of B lengths or a comma list of integers (e.g. 100,0,7)",
                         "'" + x + "'");
      lens.push_back(v);
      if (comma == std::string::npos) return lens;
      at = comma + 1;
    }
  }
  std::vector<int64_t> shape;
  std::vector<int32_t> lens = read_npy_i32(x, "--cache-lens", shape);
  if (shape.size() != 1) throw InputError("--cache-lens " + x, "an int32 .npy of shape [B]", shape_str(shape));
  return lens;
}

void check_page_size(int64_t P) {
  if (P < 16 || P > 256) throw InputError("--page-size", "16 ... 256 keys a page", std::to_string(P));
}

// The inputs without a cache: files, shape flags or the default input.
Inputs plain_inputs(const CliFlags& f) {
  if (const std::optional<AttnProblem> p = problem_from_flags(f)) return random_inputs(*p, f.seed);
  Inputs in = !f.q.empty() ? load_inputs(f.q, f.k, f.v, f.p.causal, f.p.scale) : default_inputs(f.p.causal, f.p.scale);
  apply_variants(f, in.p);
  validate(in.p);
  return in;
}

// The cache's own arrays as the flags give them, checked alone (no problem yet): the lengths,
// the page size, the table's shape. num_pages is unknown until the pages are.
KvCacheHost read_cache_flags(const CliFlags& f) {
  KvCacheHost c;
  if (!f.cache_lens.empty()) c.lens = read_cache_lens(f.cache_lens);
  if (f.page_size_opt->count() > 0) check_page_size(f.page_size);
  if (!f.block_table.empty()) {
    std::vector<int64_t> shape;
    c.table = read_npy_i32(f.block_table, "--block-table", shape);
    if (shape.size() != 2 || shape[1] < 1)
      throw InputError("--block-table " + f.block_table, "an int32 .npy [B, pages_per_seq >= 1]", shape_str(shape));
    c.page_size = f.page_size;
    c.pages_per_seq = shape[1];
  }
  return c;
}

// With --block-table and shape flags: the problem (N_k the table's capacity unless --seq-k says
// otherwise) and the cache, num_pages the largest page a sequence reads + 1, both validated.
std::pair<AttnProblem, KvCacheHost> generated_paged(AttnProblem p, KvCacheHost c, const CliFlags& f) {
  if (f.shape_opts[4]->count() == 0) p.N_k = c.pages_per_seq * c.page_size;
  KvCacheHost lens_only;
  lens_only.lens = c.lens;
  validate_kv_cache(p, lens_only);  // before len(b) is asked for each b
  int64_t last = 0;
  for (int64_t b = 0; b < p.B && int64_t(c.table.size()) == p.B * c.pages_per_seq; ++b)
    for (int64_t n = 0; n * c.page_size < c.len(p, b); ++n) last = std::max<int64_t>(last, c.table[b * c.pages_per_seq + n]);
  c.num_pages = last + 1;
  validate_kv_cache(p, c);
  return {p, c};
}

}  // namespace

void check_cache_flags(const CliFlags& f) {
  if (cache_flag_given(f).empty()) return;
  KvCacheHost c = read_cache_flags(f);
  const std::optional<AttnProblem> p = problem_from_flags(f);
  if (!f.block_table.empty() && f.q.empty() && !p)
    throw InputError("--block-table", "--q/--k/--v files of pages, or shape flags to generate them (--batch ...)",
                     "the default input, which is not paged");
  if (!p) return;  // the rest depends on the input files
  if (!f.block_table.empty()) {
    generated_paged(*p, c, f);
  } else {
    validate_kv_cache(*p, c);
  }
}

std::string varlen_flag_given(const CliFlags& f) {
  if (!f.cu_q.empty()) return "--cu-seqlens-q";
  if (!f.cu_k.empty()) return "--cu-seqlens-k";
  return "";
}

void refuse_varlen_flags(const CliFlags& f, const std::string& program) {
  const std::string flag = varlen_flag_given(f);
  if (flag.empty()) return;
  throw InputError(flag, "no packed batch in " + program + " (stages 01-04 and 06, and stage 05's v13, take one)",
                   flag + " " + (flag == "--cu-seqlens-q" ? f.cu_q : f.cu_k));
}

nlohmann::json varlen_json(const VarlenHost& v) {
  return {{"B", v.batch()}, {"cu_seqlens_q", v.cu_q}, {"cu_seqlens_k", v.cu_k}, {"total_q", v.total_q()},
          {"total_k", v.total_k()}};
}

namespace {

// One offsets file: an int32 .npy of rank 1, checked alone (validate_cu_seqlens).
std::vector<int32_t> read_cu_seqlens(const std::string& path, const std::string& flag) {
  std::vector<int64_t> shape;
  std::vector<int32_t> cu = read_npy_i32(path, flag, shape);
  if (shape.size() != 1) throw InputError(flag + " " + path, "an int32 .npy of shape [B + 1]", "shape " + shape_str(shape));
  validate_cu_seqlens(cu, flag + " " + path);
  return cu;
}

// The problem a packed batch's sequences share, from the shape flags: heads, kv heads, head dim,
// masks, scale, softcap (N_q, N_k: placeholders, each sequence has its own).
AttnProblem varlen_template(const CliFlags& f) {
  AttnProblem p = f.p;
  if (f.shape_opts[2]->count() == 0) p.H_kv = p.H;
  p.B = 1, p.N_q = p.N_k = 1;
  apply_variants(f, p);
  validate(p);
  return p;
}

}  // namespace

VarlenHost check_varlen_flags(const CliFlags& f) {
  VarlenHost v;
  if (varlen_flag_given(f).empty()) return v;
  if (f.cu_k.empty()) throw InputError("--cu-seqlens-k", "--cu-seqlens-k F with --cu-seqlens-q (both or neither)", "--cu-seqlens-q alone");
  if (f.cu_q.empty()) throw InputError("--cu-seqlens-q", "--cu-seqlens-q F with --cu-seqlens-k (both or neither)", "--cu-seqlens-k alone");
  v.cu_q = read_cu_seqlens(f.cu_q, "--cu-seqlens-q");
  v.cu_k = read_cu_seqlens(f.cu_k, "--cu-seqlens-k");
  if (v.cu_k.size() != v.cu_q.size())
    throw InputError("--cu-seqlens-k " + f.cu_k, std::to_string(v.cu_q.size()) + " offsets (as --cu-seqlens-q: B + 1)",
                     std::to_string(v.cu_k.size()));
  validate_varlen(v);
  // B is the offsets' own; the lengths too: a shape flag that says otherwise is refused.
  if (f.shape_opts[0]->count() > 0 && f.p.B != v.batch())
    throw InputError("--batch", std::to_string(v.batch()) + " (B = the " + std::to_string(v.cu_q.size()) +
                                    " offsets of --cu-seqlens-q minus 1) or no --batch",
                     std::to_string(f.p.B));
  for (int i : {3, 4})
    if (f.shape_opts[i]->count() > 0)
      throw InputError(i == 3 ? "--seq-q" : "--seq-k",
                       "no sequence length with --cu-seqlens-q/-k (each sequence's lengths are in the offsets)",
                       (i == 3 ? "--seq-q " : "--seq-k ") + std::to_string(i == 3 ? f.p.N_q : f.p.N_k));
  if (!cache_flag_given(f).empty())
    throw InputError(cache_flag_given(f), "no KV cache flags with a packed batch (--cu-seqlens-q/-k)", cache_flag_given(f));
  if (!f.o_in.empty() || !f.lse_in.empty())
    throw InputError(f.o_in.empty() ? "--lse-in" : "--o-in", "no --o-in/--lse-in with a packed batch (its forward runs)",
                     f.o_in.empty() ? f.lse_in : f.o_in);
  if (f.q.empty()) varlen_template(f);  // the heads, head dim and variants, checked now
  return v;
}

Inputs make_inputs(const CliFlags& f) {
  if (!varlen_flag_given(f).empty()) {
    VarlenHost v = check_varlen_flags(f);
    if (f.q.empty()) return random_varlen_inputs(varlen_template(f), v, f.seed);
    Inputs in = load_varlen_inputs(f.q, f.k, f.v, f.p.causal, f.p.scale, std::move(v), f.cu_q, f.cu_k);
    apply_variants(f, in.p);
    validate_varlen_problem(in.p, in.varlen);
    return in;
  }
  if (cache_flag_given(f).empty()) return plain_inputs(f);
  check_cache_flags(f);
  KvCacheHost c = read_cache_flags(f);
  Inputs in;
  if (!f.block_table.empty()) {  // the inputs are the pages themselves, from files or generated
    if (!f.q.empty()) {
      in = load_paged_inputs(f.q, f.k, f.v, f.p.causal, f.p.scale, c);
      apply_variants(f, in.p);
    } else {
      auto [p, cache] = generated_paged(*problem_from_flags(f), c, f);
      in = random_paged_inputs(p, cache, f.seed);
    }
  } else {
    in = plain_inputs(f);
    validate_kv_cache(in.p, c);  // the lengths, against the keys the inputs have
    if (f.page_size_opt->count() > 0) {  // laid out in pages of a random table
      KvCacheHost paged = make_paged(in.p, f.page_size, f.seed);
      if (c.has_lens()) paged.lens = c.lens;
      in.K = page_kv(in.p, paged, in.K);
      in.V = page_kv(in.p, paged, in.V);
      in.p = cache_problem(in.p, paged);
      c = std::move(paged);
    }
    in.cache = std::move(c);
  }
  validate(in.p);
  validate_kv_cache(in.p, in.cache);
  return in;
}

std::string cache_flag_given(const CliFlags& f) {
  if (!f.cache_lens.empty()) return "--cache-lens";
  if (f.page_size_opt && f.page_size_opt->count() > 0) return "--page-size";
  if (!f.block_table.empty()) return "--block-table";
  return "";
}

void refuse_cache_flags(const CliFlags& f) {
  const std::string flag = cache_flag_given(f);
  if (flag.empty()) return;
  const std::string value = flag == "--cache-lens"  ? f.cache_lens
                            : flag == "--page-size" ? std::to_string(f.page_size)
                                                    : f.block_table;
  throw InputError(flag, "no KV cache flags (stage 05 takes them, kernel v14)", flag + " " + value);
}

nlohmann::json cache_json(const KvCacheHost& c) {
  return {{"lens", c.lens}, {"page_size", c.page_size}, {"pages_per_seq", c.pages_per_seq}, {"num_pages", c.num_pages}};
}

void check_dtype(const CliFlags& f, const std::string& supported) {
  if (f.dtype != supported)
    throw InputError("--dtype", supported + " (this program computes in " + supported + ")",
                     "'" + f.dtype + "'");
}

void check_output_paths(const CliFlags& f) {
  namespace fs = std::filesystem;
  const std::pair<const char*, const std::string*> outs[] = {
      {"--out", &f.out}, {"--lse", &f.lse}, {"--dq", &f.dq}, {"--dk", &f.dk}, {"--dv", &f.dv}};
  const std::pair<const char*, const std::string*> ins[] = {
      {"--q", &f.q}, {"--k", &f.k}, {"--v", &f.v}, {"--do", &f.dO}, {"--o-in", &f.o_in}, {"--lse-in", &f.lse_in},
      {"--cache-lens", &f.cache_lens}, {"--block-table", &f.block_table}, {"--cu-seqlens-q", &f.cu_q},
      {"--cu-seqlens-k", &f.cu_k}};
  std::vector<std::pair<std::string, fs::path>> seen;  // (flag, canonical path) of inputs and outputs
  std::error_code ec;
  for (auto& [flag, path] : ins)
    if (!path->empty()) seen.emplace_back(flag, fs::weakly_canonical(fs::absolute(*path, ec), ec));
  for (auto& [flag, path] : outs) {
    if (path->empty()) continue;
    const std::string who = std::string(flag) + " " + *path;
    fs::path dir = fs::path(*path).parent_path();
    if (dir.empty()) dir = ".";
    if (!fs::is_directory(dir, ec) || access(dir.c_str(), W_OK) != 0)
      throw InputError(who, "a path in an existing writable folder",
                       "folder '" + dir.string() + "' missing or not writable");
    // Only regular files are (re)placed: never a folder, a device, a pipe or a symbolic link.
    const fs::file_status st = fs::symlink_status(*path, ec);
    if (fs::exists(st) && !fs::is_regular_file(st))
      throw InputError(who, "a new or regular file",
                       fs::is_directory(st) ? "a folder" : fs::is_symlink(st) ? "a symbolic link" : "a special file");
    const fs::path canon = fs::weakly_canonical(fs::absolute(*path, ec), ec);
    for (auto& [other, p] : seen)
      if (p == canon) throw InputError(who, "a path different from " + other, "the same file");
    seen.emplace_back(flag, canon);
  }
}

int run_program(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  const std::string name = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << name << ": " << one_line(e.what()) << " (see --help)\n";
    return kExitBadInput;
  }
  try {
    return body();
  } catch (const InputError& e) {
    std::cerr << name << ": " << one_line(e.what()) << "\n";
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    std::cerr << name << ": memory: expected the problem to fit in RAM, found it does not"
              << " (try a smaller --seq-q/--seq-k, or --no-check to skip the O(N^2) baselines)\n";
    return kExitBadInput;
  } catch (const std::length_error&) {
    std::cerr << name << ": memory: expected the problem to fit in RAM, found it does not"
              << " (try a smaller --seq-q/--seq-k, or --no-check to skip the O(N^2) baselines)\n";
    return kExitBadInput;
  } catch (const std::exception& e) {  // not the input's fault (e.g. a CUDA error): exit 1
    std::cerr << name << ": error: " << one_line(e.what()) << "\n";
    return 1;
  }
}

bool warn_nonfinite(const std::string& prog, const char* what, const Tensor& x, bool lse) {
  int64_t bad = 0;
  for (float e : x.data) bad += lse ? std::isnan(e) || e == INFINITY : !std::isfinite(e);
  if (bad) std::cerr << prog << ": warning: " << what << " has " << bad << " non-finite values\n";
  return bad > 0;
}

nlohmann::json problem_json(const AttnProblem& p) {
  return {{"B", p.B},     {"H", p.H}, {"H_kv", p.H_kv},       {"N_q", p.N_q},
          {"N_k", p.N_k}, {"d", p.d}, {"causal", p.causal}, {"scale", p.resolved_scale()},
          {"window", {p.window_left, p.window_right}}, {"softcap", p.softcap}};
}

std::string human_bytes(int64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

namespace {

nlohmann::json err_json(const ErrorStats& e) {
  return {{"max_abs", e.max_abs}, {"max_rel", e.max_rel}, {"rel_fro", e.rel_fro},
          {"nonfinite", e.nonfinite}};
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// O and LSE from files must be this problem's: a row's LSE is -inf exactly when the row sees no
// key (checked always, O(N)); with the float64 reference at hand, LSE within 1e-2 max(1, |LSE|)
// and O within 5e-2 max(1, max|O|) of it (loose enough for a 16-bit forward, tight enough to
// catch another mask, scale or input). Throws InputError naming the flag.
void check_given_forward(const AttnProblem& p, const ForwardRun& fr, const Baselines* base, const CliFlags& f) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        const bool none = p.keys_seen(i) == 0, inf = fr.LSE[p.lse_offset(b, h, i)] == -INFINITY;
        if (none != inf)
          throw InputError("--lse-in " + f.lse_in,
                           std::string("-inf exactly for the rows that see no key (") + (p.causal ? "causal" : "not causal") +
                               (p.has_window() ? ", windowed" : "") + ")",
                           "row " + std::to_string(i) + " of (b " + std::to_string(b) + ", h " + std::to_string(h) +
                               (inf ? ") is -inf" : ") is finite"));
      }
  if (!base) return;
  const ErrorStats eL = compare(fr.LSE.ptr(), base->LSE64().ptr(), fr.LSE.numel());
  const ErrorStats eO = compare(fr.O.ptr(), base->O64().ptr(), fr.O.numel());
  const double tolL = 1e-2 * std::max(1.0, max_abs_finite(base->LSE64().ptr(), base->LSE64().numel()));
  const double tolO = 5e-2 * std::max(1.0, max_abs_finite(base->O64().ptr(), base->O64().numel()));
  if (eL.max_abs > tolL)
    throw InputError("--lse-in " + f.lse_in, "this problem's log-sum-exp (within " + num(tolL) + " of float64)",
                     "an error of " + num(eL.max_abs) + " at flat index " + std::to_string(eL.worst));
  if (eO.max_abs > tolO)
    throw InputError("--o-in " + f.o_in, "this problem's attention output (within " + num(tolO) + " of float64)",
                     "an error of " + num(eO.max_abs) + " at flat index " + std::to_string(eO.worst));
}

}  // namespace

int stage_main(int argc, char** argv, const Stage& stage,
               const std::function<void(CLI::App&)>& extra_flags,
               const std::function<void(const Inputs&, nlohmann::json&, std::ostream&)>& extra_report) {
  CLI::App app{stage.name + ": " + stage.idea, stage.name};
  CliFlags f;
  add_common_flags(app, f, bool(stage.backward));
  if (extra_flags) extra_flags(app);
  return run_program(app, argc, argv, [&]() -> int {
    // A KV cache only where the stage has a forward on one (stage 05), never with a backward.
    const bool cache = !cache_flag_given(f).empty();
    // A packed batch only where the stage indexes through the problem's offsets (the CPU stages),
    // or has a kernel that reads one (stage 05: varlen_forward_for).
    const bool varlen = !varlen_flag_given(f).empty();
    if (varlen && !stage.varlen && !stage.varlen_forward_for) refuse_varlen_flags(f, stage.name);
    if (cache && (!stage.cache_forward_for || stage.backward)) refuse_cache_flags(f);
    // A GPU stage's forward depends on --dtype, and forward_for may set the rest of the stage from
    // the flags (stage 06's --device): copy the stage after it.
    DType dtype = DType::fp32;
    ForwardFn fwd;
    if (f.dtype == "fp8") {  // stage 05's v15: its inputs are checked and uploaded as bf16
      if (!stage.fp8_forward)
        throw InputError("--dtype", stage.forward_for ? "fp32, fp16 or bf16 (" + stage.name + " has no FP8 kernel)"
                                                      : "fp32 (this program computes in fp32)",
                         "'fp8'");
      if (cache || varlen)
        throw InputError("--dtype", "fp32, fp16 or bf16 with a KV cache or a packed batch (the FP8 kernel takes neither)", "'fp8'");
      fwd = stage.fp8_forward();
      dtype = DType::bf16;
    } else if (stage.forward_for) {
      fwd = stage.forward_for(dtype = parse_dtype(f.dtype));
    } else {
      check_dtype(f);
    }
    Stage st = stage;
    if (fwd) st.forward = fwd;
    // forward_for may have chosen a GPU path (stage 06 --device gpu), which takes no packed batch.
    if (varlen && !st.varlen && !stage.varlen_forward_for) refuse_varlen_flags(f, stage.name + " on the GPU");
    VarlenForwardFn varlen_fwd;  // the whole batch in one call, where the stage has one
    VarlenBackwardFn varlen_bwd;
    if (varlen && stage.varlen_forward_for) varlen_fwd = stage.varlen_forward_for(dtype);
    if (varlen && stage.backward && stage.varlen_forward_for) {
      if (!stage.varlen_backward_for) refuse_varlen_flags(f, stage.name + " (its backward)");
      varlen_bwd = stage.varlen_backward_for(dtype);
    }
    CacheForwardFn cache_fwd;
    if (cache) cache_fwd = stage.cache_forward_for(dtype);
    check_output_paths(f);
    check_cache_flags(f);
    check_varlen_flags(f);
    // A GPU stage refuses what it can before any input is made (a large random problem takes
    // seconds to generate), and again once the inputs exist.
    if (st.precheck)
      if (const std::optional<AttnProblem> p = problem_from_flags(f)) st.precheck(*p, nullptr, dtype);
    Inputs in = make_inputs(f);
    if (st.precheck) st.precheck(in.p, &in, dtype);
    const bool bwd = bool(stage.backward);
    // Refuse a run that cannot fit before allocating it (the stage's own N x N matrices, and
    // unless --no-check, stage 01's: the baseline every report compares with).
    const int nxn = bwd ? std::max(stage.nxn_forward, stage.nxn_backward) : stage.nxn_forward;
    check_memory(in.varlen.any() ? estimate_varlen_run_bytes(in.p, in.varlen, nxn, bwd, !f.no_check)
                                 : estimate_run_bytes(in.p, nxn, bwd, !f.no_check),
                 in.varlen.any() ? "--cu-seqlens-q/--cu-seqlens-k" : "--seq-q/--seq-k",
                 f.no_check ? "the stage's N_q x N_k matrices and the tensors"
                            : "N_q x N_k matrices of stage 01, the baseline; --no-check skips it");
    if (bwd) add_grad_output(in, f.dO, f.seed);

    // The backward from O and LSE alone: from files (e.g. another implementation's forward), or
    // from the stage's own forward.
    const bool given = !f.o_in.empty();
    if (given && (!f.out.empty() || !f.lse.empty()))
      throw InputError(f.out.empty() ? "--lse" : "--out", "no forward outputs with --o-in/--lse-in (the forward does not run)",
                       "an output path");
    // The baselines (stage 01 and float64) first: with O and LSE from files they also check them.
    std::optional<Baselines> base;
    if (!f.no_check) base.emplace(in, bwd);
    ForwardRun fr;
    if (given) {
      fr.O = load_npy_as(f.o_in, "--o-in", in.Q.shape, /*allow_neg_inf=*/false);
      fr.LSE = load_npy_as(f.lse_in, "--lse-in", {in.p.B, in.p.H, in.p.N_q}, /*allow_neg_inf=*/true);
      check_given_forward(in.p, fr, base ? &*base : nullptr, f);
    } else {
      fr = in.cache.any() ? run_forward(cache_fwd, in)
           : varlen_fwd     ? run_forward(varlen_fwd, in)
                            : run_forward(st.forward, in);
    }
    // With a cache, the work is each sequence's own keys, not the capacity N_k.
    // With a packed batch, each sequence's own N_q(b) x N_k(b), not the padded B N_q N_k.
    const double flops = in.cache.any()    ? cache_forward_flops(in.p, in.cache)
                         : in.varlen.any() ? varlen_forward_flops(in.p, in.varlen)
                                           : in.p.forward_flops();
    BackwardRun br;
    if (bwd) br = varlen_bwd ? run_backward(varlen_bwd, in, fr) : run_backward(st.backward, in, fr);
    // From files that passed the checks above a backward can still meet an LSE that is not its
    // scores' (with --no-check only the -inf rows are checked): refuse non-finite gradients
    // rather than write them.
    if (given && bwd)
      for (const auto& [x, name] : {std::pair<const Tensor*, const char*>{&br.dQ, "dQ"}, {&br.dK, "dK"}, {&br.dV, "dV"}})
        if (count_nonfinite(x->ptr(), x->numel()) > 0)
          throw InputError("--lse-in " + f.lse_in, "the log-sum-exp of the problem's scores",
                           std::string("an LSE that makes ") + name + " non-finite");

    nlohmann::json j;
    j["stage"] = stage.name;
    j["idea"] = st.idea;
    j["input"] = in.source;
    j["problem"] = problem_json(in.p);
    if (!given)
      j["forward"] = {{"ms", fr.ms}, {"extra_bytes", fr.extra_bytes},
                      {"gflops", flops / (fr.ms * 1e6)}};
    if (bwd) j["backward"] = {{"ms", br.ms}, {"extra_bytes", br.extra_bytes},
                              {"gflops", 2.5 * flops / (br.ms * 1e6)}};

    std::ostringstream txt;
    txt << stage.name << " — " << st.idea << "\n"
        << "  input    : " << in.source << "\n"
        << "  problem  : " << in.p.describe() << "\n";
    if (in.cache.any()) {
      j["cache"] = cache_json(in.cache);
      txt << "  cache    : ";
      if (in.cache.has_lens()) {
        txt << "lengths";
        for (size_t b = 0; b < in.cache.lens.size() && b < 8; ++b) txt << (b ? ", " : " ") << in.cache.lens[b];
        if (in.cache.lens.size() > 8) txt << ", ... (" << in.cache.lens.size() << ")";
      } else {
        txt << "every sequence N_k keys";
      }
      if (in.cache.paged())
        txt << "; pages of " << in.cache.page_size << " keys, " << in.cache.pages_per_seq << " a sequence, "
            << in.cache.num_pages << " in the cache";
      txt << "\n";
    }
    if (in.varlen.any()) {
      const VarlenHost& v = in.varlen;
      j["varlen"] = varlen_json(v);
      txt << "  varlen   : a packed batch of " << v.batch() << " sequences, " << v.total_q() << " queries and "
          << v.total_k() << " keys in all (N_q, N_k above: the longest); N_q(b), N_k(b) =";
      for (int64_t b = 0; b < v.batch() && b < 8; ++b) txt << (b ? ", " : " ") << v.n_q(b) << "x" << v.n_k(b);
      if (v.batch() > 8) txt << ", ...";
      txt << "\n";
    }
    if (given)
      txt << "  forward  : not run: O from " << f.o_in << ", LSE from " << f.lse_in << "\n";
    else
      txt << "  forward  : " << num(fr.ms) << " ms, extra memory " << human_bytes(fr.extra_bytes)
          << " (" << fr.extra_bytes << " bytes)\n";
    if (given) j["forward"]["from_files"] = {{"O", f.o_in}, {"LSE", f.lse_in}};
    if (bwd)
      txt << "  backward : " << num(br.ms) << " ms, extra memory " << human_bytes(br.extra_bytes)
          << " (" << br.extra_bytes << " bytes)\n";
    if (fr.gpu_ms >= 0) {  // a GPU stage: its kernels' own time and GPU memory
      const double tflops = flops / (fr.gpu_ms * 1e9);
      j["forward"]["gpu_ms"] = fr.gpu_ms;
      j["forward"]["gpu_extra_bytes"] = fr.gpu_extra_bytes;
      j["forward"]["gpu_tflops"] = tflops;
      j["dtype"] = f.dtype;
      txt << "  gpu      : " << num(fr.gpu_ms) << " ms kernel time (CUDA events, one warm call), "
          << num(tflops) << " TFLOP/s, extra GPU memory " << human_bytes(fr.gpu_extra_bytes) << " ("
          << fr.gpu_extra_bytes << " bytes); dtype " << f.dtype << "\n";
    }
    if (bwd && br.gpu_ms >= 0) {  // a GPU backward: the same, by the 2.5x FLOP convention
      const double tflops = in.p.backward_flops() / (br.gpu_ms * 1e9);
      j["backward"]["gpu_ms"] = br.gpu_ms;
      j["backward"]["gpu_extra_bytes"] = br.gpu_extra_bytes;
      j["backward"]["gpu_tflops"] = tflops;
      txt << "  gpu bwd  : " << num(br.gpu_ms) << " ms kernel time (CUDA events, one warm call), "
          << num(tflops) << " TFLOP/s (2.5x the forward's FLOPs), extra GPU memory "
          << human_bytes(br.gpu_extra_bytes) << " (" << br.gpu_extra_bytes << " bytes)\n";
    }

    if (base) {
      const ForwardErrors e = base->compare(fr);
      j["forward"]["errors"] = {{"O_vs_01", err_json(e.O_vs_01)},
                                {"LSE_vs_01", err_json(e.LSE_vs_01)},
                                {"O_vs_f64", err_json(e.O_vs_f64)},
                                {"LSE_vs_f64", err_json(e.LSE_vs_f64)}};
      j["max_abs_logit"] = base->max_abs_logit();
      txt << "  max |S|  : " << num(base->max_abs_logit()) << " (largest logit magnitude)\n"
          << "  O   vs stage 01: max abs " << num(e.O_vs_01.max_abs) << "   vs float64: max abs "
          << num(e.O_vs_f64.max_abs) << ", rel Frobenius " << num(e.O_vs_f64.rel_fro) << "\n"
          << "  LSE vs stage 01: max abs " << num(e.LSE_vs_01.max_abs) << "   vs float64: max abs "
          << num(e.LSE_vs_f64.max_abs) << "\n";
      if (bwd) {
        const BackwardErrors b = base->compare(br);
        j["backward"]["errors"] = {
            {"dQ_vs_01", err_json(b.dQ_vs_01)},   {"dK_vs_01", err_json(b.dK_vs_01)},
            {"dV_vs_01", err_json(b.dV_vs_01)},   {"dQ_vs_f64", err_json(b.dQ_vs_f64)},
            {"dK_vs_f64", err_json(b.dK_vs_f64)}, {"dV_vs_f64", err_json(b.dV_vs_f64)}};
        txt << "  dQ/dK/dV vs stage 01: max abs " << num(b.dQ_vs_01.max_abs) << " / "
            << num(b.dK_vs_01.max_abs) << " / " << num(b.dV_vs_01.max_abs) << "\n"
            << "  dQ/dK/dV vs float64 : max abs " << num(b.dQ_vs_f64.max_abs) << " / "
            << num(b.dK_vs_f64.max_abs) << " / " << num(b.dV_vs_f64.max_abs) << "\n";
      }
    }
    bool nonfinite = warn_nonfinite(stage.name, "O", fr.O, false);
    nonfinite |= warn_nonfinite(stage.name, "LSE", fr.LSE, true);
    if (bwd) {
      nonfinite |= warn_nonfinite(stage.name, "dQ", br.dQ, false);
      nonfinite |= warn_nonfinite(stage.name, "dK", br.dK, false);
      nonfinite |= warn_nonfinite(stage.name, "dV", br.dV, false);
    }
    // A stage that fails by design says which failure applied (stage 01: overflow, or a whole
    // row that underflows), when its outputs show one or when the checks run anyway (the same
    // O(N^2 d) work).
    if (st.diagnose && (nonfinite || !f.no_check)) {
      std::istringstream lines(st.diagnose(in));
      for (std::string line; std::getline(lines, line);) std::cerr << stage.name << ": warning: " << line << "\n";
    }
    if (extra_report) extra_report(in, j, txt);
    // Outputs last: every check that can fail has run, and the files are written all or nothing.
    std::vector<NpyOut> outs;
    if (!f.out.empty()) outs.push_back({f.out, &fr.O, "--out"});
    if (!f.lse.empty()) outs.push_back({f.lse, &fr.LSE, "--lse"});
    if (!f.dq.empty()) outs.push_back({f.dq, &br.dQ, "--dq"});
    if (!f.dk.empty()) outs.push_back({f.dk, &br.dK, "--dk"});
    if (!f.dv.empty()) outs.push_back({f.dv, &br.dV, "--dv"});
    write_npy_all(outs);
    if (f.json) std::cout << j.dump(2) << "\n";
    else std::cout << txt.str();
    return 0;
  });
}

}  // namespace fa
