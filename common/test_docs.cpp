// The docs test (ctest label `docs`): the course's Markdown files are part of the product, so
// every relative link in them must lead somewhere. For each .md file of the repository (build
// folders and hidden folders excepted):
//   - every link target `[text](path)` that is not a URL exists, relative to the file;
//   - every `#anchor` (alone, or after a path to a .md file) names a heading of that file, with
//     GitHub's rule for heading ids (lower case; letters, digits, '-' and '_' kept; spaces become
//     '-'; everything else dropped).
// Links inside fenced code blocks and inline code spans are not links and are skipped.
// Also: no line-number references into sources; every program transcript a README quotes is what
// the program prints (ctest docs_transcripts, below); every CMake preset can be built and tested.
// FA_SOURCE_DIR is the repository root, FA_BUILD_DIR this build (set by CMake).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> markdown_files(const fs::path& root) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.rfind("build", 0) == 0 || name[0] == '.' || name == "node_modules")) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".md") out.push_back(it->path());
  }
  return out;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

// GitHub's heading id, for the ASCII part of a heading.
std::string slug(const std::string& heading) {
  std::string s;
  for (unsigned char c : heading) {
    if (std::isalnum(c)) s += char(std::tolower(c));
    else if (c == ' ' || c == '-') s += '-';
    else if (c == '_') s += '_';
  }
  return s;
}

// The ids of a file's headings (lines starting with '#', outside code blocks).
std::set<std::string> anchors(const fs::path& p) {
  std::set<std::string> out;
  bool code = false;
  for (const std::string& line : lines_of(p)) {
    if (line.rfind("```", 0) == 0) code = !code;
    if (code || line.empty() || line[0] != '#') continue;
    const size_t start = line.find_first_not_of('#');
    if (start == std::string::npos) continue;
    std::string text = line.substr(start);
    const size_t first = text.find_first_not_of(' ');
    out.insert(slug(first == std::string::npos ? "" : text.substr(first)));
  }
  return out;
}

// The line without its inline code spans (`...`).
std::string without_code_spans(const std::string& line) {
  std::string out;
  bool in_code = false;
  for (char c : line) {
    if (c == '`') in_code = !in_code;
    else if (!in_code) out += c;
  }
  return out;
}

}  // namespace

TEST_CASE("docs: every relative link in every .md file leads to a file and, with #, to a heading") {
  const fs::path root = FA_SOURCE_DIR;
  const std::vector<fs::path> files = markdown_files(root);
  REQUIRE(files.size() >= 10);  // the READMEs and docs/ are found at all
  const std::regex link(R"(\]\(([^)\s]+)\))");
  int64_t checked = 0;
  for (const fs::path& md : files) {
    bool code = false;
    const std::vector<std::string> lines = lines_of(md);
    for (size_t n = 0; n < lines.size(); ++n) {
      if (lines[n].rfind("```", 0) == 0) code = !code;
      if (code) continue;
      const std::string text = without_code_spans(lines[n]);
      for (auto m = std::sregex_iterator(text.begin(), text.end(), link); m != std::sregex_iterator(); ++m) {
        const std::string target = (*m)[1];
        if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
        const size_t hash = target.find('#');
        const std::string path = target.substr(0, hash);
        const fs::path file = path.empty() ? md : (md.parent_path() / path).lexically_normal();
        INFO(fs::relative(md, root).string() << ":" << n + 1 << ": " << target);
        CHECK(fs::exists(file));
        if (hash != std::string::npos && fs::exists(file) && file.extension() == ".md")
          CHECK(anchors(file).count(target.substr(hash + 1)) == 1);
        ++checked;
      }
    }
  }
  CHECK(checked > 100);
}

// Line numbers of source files go stale with the next edit; the docs cite functions, variables or
// the comment that starts a step instead. So "line(s) N" may appear only on a line that names a
// paper's algorithm ("Alg. 1 line 5", "Algorithm 2"), whose line numbers do not move, and
// "file.ext:N" never.
TEST_CASE("docs: no line-number references into source files") {
  const fs::path root = FA_SOURCE_DIR;
  const std::regex line_ref(R"(\b[Ll]ines? [0-9]+)");
  const std::regex file_colon(R"(\.(hpp|cpp|cuh|cu|py|sh):[0-9]+)");
  for (const fs::path& md : markdown_files(root)) {
    const std::vector<std::string> lines = lines_of(md);
    for (size_t n = 0; n < lines.size(); ++n) {
      const std::string& l = lines[n];
      INFO(fs::relative(md, root).string() << ":" << n + 1 << ": " << l);
      CHECK_FALSE(std::regex_search(l, file_colon));
      if (l.find("Alg") == std::string::npos) CHECK_FALSE(std::regex_search(l, line_ref));
    }
  }
}

TEST_CASE("docs: the heading ids follow GitHub's rule") {
  CHECK(slug("v3 to v6: one idea each, measured") == "v3-to-v6-one-idea-each-measured");
  CHECK(slug("Lesson 2: `exp` overflows, and underflows") == "lesson-2-exp-overflows-and-underflows");
  CHECK(slug("Where v1's time goes") == "where-v1s-time-goes");
  CHECK(slug("Stage 05 \xe2\x80\x94 FlashAttention") == "stage-05--flashattention");  // an em dash
}

// ---- Transcripts: the program output a README quotes is re-run and compared. ----------------
// A transcript is a fenced block whose lines starting with "$ build/" are commands (a trailing
// "# comment" is dropped) and whose other lines, up to the next command, are what that command
// printed (stdout and stderr). A line "..." stands for any number of lines. The quoted lines must
// appear in the real output in the same order, compared after masking numbers (times, sizes and
// errors differ from machine to machine; the words, the lines, and "inf"/"nan" must not), except
// on warning lines, whose numbers (counts of non-finite values, the largest logit) are exact.
// A block that cannot be re-run as it stands (its inputs are made elsewhere) is preceded by the
// line "<!-- transcript: not re-run: WHY -->"; commands run from the repository root, with
// "build/" meaning this build's folder.
namespace {

struct Transcript {
  fs::path md;
  size_t line;  // of the command, 1-based
  std::string command;
  std::vector<std::string> expected;
};

std::vector<Transcript> transcripts(const fs::path& md, int* skipped) {
  std::vector<Transcript> out;
  const std::vector<std::string> lines = lines_of(md);
  bool code = false, skip = false;
  Transcript* cur = nullptr;  // the command whose output the block's next lines are
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string& l = lines[n];
    if (l.rfind("```", 0) == 0) {
      code = !code;
      cur = nullptr;
      if (code) skip = n > 0 && lines[n - 1].rfind("<!-- transcript: not re-run:", 0) == 0;
      if (code && skip) ++*skipped;
      continue;
    }
    if (!code || skip) continue;
    if (l.rfind("$ build/", 0) == 0) {
      std::string cmd = l.substr(2);
      const size_t hash = cmd.find(" #");
      if (hash != std::string::npos) cmd = cmd.substr(0, hash);
      out.push_back({md, n + 1, cmd, {}});
      cur = &out.back();
    } else if (l.rfind("$ ", 0) == 0) {
      cur = nullptr;  // another command (scripts/...: it builds first): not re-run here
    } else if (cur && !l.empty()) {
      cur->expected.push_back(l);
    }
  }
  return out;
}

// Numbers replaced by '#', except on warning lines. "inf" and "nan" are words and stay.
std::string masked(const std::string& line) {
  if (line.find("warning:") != std::string::npos) return line;
  static const std::regex number(R"([-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?)");
  return std::regex_replace(line, number, "#");
}

// Runs cmd from `cwd`, stdout and stderr together.
std::vector<std::string> run(const std::string& cmd, const fs::path& cwd) {
  const std::string full = "cd '" + cwd.string() + "' && " + cmd + " 2>&1";
  std::vector<std::string> out;
  FILE* f = popen(full.c_str(), "r");
  if (!f) return out;
  std::string cur;
  for (int c; (c = std::fgetc(f)) != EOF;) {
    if (c == '\n') out.push_back(cur), cur.clear();
    else cur += char(c);
  }
  if (!cur.empty()) out.push_back(cur);
  pclose(f);
  return out;
}

// Does `expected` ("..." = any lines) appear in `actual`, in order, after masking? Returns the
// first expected line that could not be found ("" if all were).
std::string first_missing(const std::vector<std::string>& expected, const std::vector<std::string>& actual) {
  size_t a = 0;
  for (const std::string& e : expected) {
    if (e == "...") continue;
    const std::string me = masked(e);
    while (a < actual.size() && masked(actual[a]) != me) ++a;
    if (a == actual.size()) return e;
    ++a;
  }
  return "";
}

}  // namespace

TEST_CASE("docs: the masking and matching of transcripts") {
  CHECK(masked("  forward  : 3.03e+03 ms, extra memory 512.01 MiB (536879072 bytes)") ==
        "  forward  : # ms, extra memory # MiB (# bytes)");
  CHECK(masked("LSE vs stage 01: max abs inf") == "LSE vs stage #: max abs inf");
  CHECK(masked("LSE vs stage 01: max abs 0") != masked("LSE vs stage 01: max abs inf"));
  CHECK(masked("01_naive: warning: O has 1376 non-finite values") == "01_naive: warning: O has 1376 non-finite values");
  const std::vector<std::string> actual = {"a 1", "b 2", "c 3"};
  CHECK(first_missing({"a 5", "...", "c 7"}, actual).empty());
  CHECK(first_missing({"c 3", "a 1"}, actual) == "a 1");  // order matters
  CHECK(first_missing({"b 2", "d 4"}, actual) == "d 4");
}

TEST_CASE("docs: every program transcript a README quotes is what the program prints") {
  const fs::path root = FA_SOURCE_DIR, build = FA_BUILD_DIR;
  int skipped = 0, ran = 0;
  for (const fs::path& md : markdown_files(root))
    for (const Transcript& t : transcripts(md, &skipped)) {
      INFO(fs::relative(md, root).string() << ":" << t.line << ": $ " << t.command);
      REQUIRE_FALSE(t.expected.empty());
      const std::string exe = t.command.substr(0, t.command.find(' '));  // build/NN/NN
      const fs::path bin = build / fs::path(exe).lexically_relative("build");
      if (!fs::exists(bin)) {
        MESSAGE("not built here: " << bin.string());
        continue;
      }
      const std::vector<std::string> out = run(bin.string() + t.command.substr(exe.size()), root);
      const std::string missing = first_missing(t.expected, out);
      INFO("quoted line not printed (numbers masked): " << missing);
      std::string got;
      for (const std::string& o : out) got += "\n    " + o;
      INFO("the program printed:" << got);
      CHECK(missing.empty());
      ++ran;
    }
  CHECK(ran >= 4);  // the transcripts are found at all
  CHECK(skipped <= 2);  // and few are exempt
}

// Every configure preset has its build and test preset of the same name, so that
// `cmake --preset X && cmake --build --preset X && ctest --preset X` works for each X the README
// lists (a learner found `cmake --build --preset release` refused once).
TEST_CASE("docs: every CMake preset can be configured, built and tested by its name") {
  std::ifstream f(fs::path(FA_SOURCE_DIR) / "CMakePresets.json");
  REQUIRE(f.good());
  const nlohmann::json presets = nlohmann::json::parse(f);
  auto names = [&](const char* kind) {
    std::set<std::string> out;
    for (const auto& e : presets.at(kind)) out.insert(e.at("name").get<std::string>());
    return out;
  };
  const std::set<std::string> configure = names("configurePresets");
  REQUIRE(configure.size() >= 4);
  CHECK(names("buildPresets") == configure);
  CHECK(names("testPresets") == configure);
}

// docs/interview.md answers with numbers this repository measured, each in at most 12 lines. Each numbered answer must
// link at least one file (the README, doc or source that shows it), and every decimal number in
// its prose (2.96e-6, 0.90, 1.4 ...) must appear, as written, in one of the files it links, and
// every function it names as `name()` must appear there as `name(`: an answer cannot quote a number
// or a function its sources no longer have. (Integers are left out: counts and sizes such as
// "16 rows" or "d = 128" are read off the problem, not measured.)
TEST_CASE("docs: every interview answer's numbers and functions are in the files it links") {
  const fs::path root = FA_SOURCE_DIR;
  const fs::path md = root / "docs" / "interview.md";
  const std::vector<std::string> lines = lines_of(md);
  REQUIRE(!lines.empty());
  // The answers: a line "N. **question**" starts one; the next such line or a heading ends it.
  std::vector<std::pair<std::string, std::string>> answers;  // (number, text)
  const std::regex start(R"(^(\d+)\. \*\*)");
  for (const std::string& line : lines) {
    std::smatch m;
    if (std::regex_search(line, m, start)) answers.push_back({m[1], line + "\n"});
    else if (!line.empty() && line[0] == '#') answers.push_back({"", ""});  // a heading closes it
    else if (!answers.empty() && !answers.back().first.empty()) answers.back().second += line + "\n";
  }
  const std::regex link(R"(\]\(([^)\s#]+)(#[^)\s]*)?\))");
  const std::regex decimal(R"((^|[^\w.])(\d+\.\d+(e-?\d+)?))");
  const std::regex function(R"(`(\w+)\(\)`)");
  int64_t numbered = 0, numbers = 0;
  for (const auto& [num, text] : answers) {
    if (num.empty()) continue;
    ++numbered;
    INFO("interview.md, answer " << num);
    std::string sources;  // the text of every file the answer links
    for (auto m = std::sregex_iterator(text.begin(), text.end(), link); m != std::sregex_iterator(); ++m) {
      const std::string target = (*m)[1];
      if (target.find("://") != std::string::npos) continue;
      const fs::path file = (md.parent_path() / target).lexically_normal();
      if (!fs::is_regular_file(file)) continue;  // a folder, or a missing file (the link test says so)
      std::ifstream f(file);
      sources += std::string(std::istreambuf_iterator<char>(f), {}) + "\n";
    }
    CHECK_MESSAGE(!sources.empty(), "the answer links no file that shows it");
    // An answer is said in an interview: at most 12 lines, the question's line included.
    std::string body = text;
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.pop_back();
    const auto answer_lines = std::count(body.begin(), body.end(), '\n') + 1;
    INFO("answer lines: " << answer_lines);
    CHECK(answer_lines <= 12);
    // The prose without link targets (a path's digits are not claims).
    const std::string prose = std::regex_replace(text, std::regex(R"(\]\([^)]*\))"), "]");
    for (auto m = std::sregex_iterator(prose.begin(), prose.end(), decimal); m != std::sregex_iterator(); ++m) {
      std::string x = (*m)[2];
      std::string padded = x;  // 2.42e-6 is printed 2.42e-06 by C's %e
      const size_t e = x.find("e-");
      if (e != std::string::npos && x.size() == e + 3) padded = x.substr(0, e + 2) + "0" + x.substr(e + 2);
      INFO("number " << x);
      CHECK((sources.find(x) != std::string::npos || sources.find(padded) != std::string::npos));
      ++numbers;
    }
    for (auto m = std::sregex_iterator(prose.begin(), prose.end(), function); m != std::sregex_iterator(); ++m) {
      INFO("function " << (*m)[1]);
      CHECK(sources.find(std::string((*m)[1]) + "(") != std::string::npos);
    }
  }
  CHECK(numbered >= 25);  // issue 14: at least 25 questions
  CHECK(numbers >= 40);
}

// ---- The lessons' shape (issue: the course text) --------------------------------------------
// A stage README is a lesson a learner reads in one sitting; the run history lives in its lab
// notebook (docs/lab/). The budgets keep it that way: the top README at most 150 lines, a stage
// README at most 250, stage 05 (twelve kernel versions) at most 450.
TEST_CASE("docs: every README stays within its line budget") {
  const fs::path root = FA_SOURCE_DIR;
  const std::regex stage_dir(R"(^\d\d_\w+$)");
  int stages = 0;
  CHECK(lines_of(root / "README.md").size() <= 150);
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !std::regex_match(name, stage_dir) || !fs::exists(e.path() / "README.md")) continue;
    const size_t budget = name == "05_cuda_tiled" ? 450 : 250;
    INFO(name << "/README.md: " << lines_of(e.path() / "README.md").size() << " lines, budget " << budget);
    CHECK(lines_of(e.path() / "README.md").size() <= budget);
    CHECK(fs::exists(root / "docs" / "lab" / (name + ".md")));  // and its lab notebook exists
    ++stages;
  }
  CHECK(stages >= 6);
}

// Every glossary term a lesson uses is defined there in bold (`**warp**`) or linked to its entry
// in docs/glossary.md (`glossary.md#warp`), at least once per lesson. The terms are the glossary's
// `### ` headings ("Br, Bc" is two terms); a term written in lower case matches any case, one with
// capitals matches exactly; plurals count; code (fenced or inline) and link targets do not.
namespace {

struct Term {
  std::string word, anchor;
};

std::vector<Term> glossary_terms(const fs::path& glossary) {
  std::vector<Term> out;
  bool code = false;
  for (const std::string& line : lines_of(glossary)) {
    if (line.rfind("```", 0) == 0) code = !code;
    if (code || line.rfind("### ", 0) != 0) continue;
    const std::string heading = line.substr(4);
    std::stringstream ss(heading);
    for (std::string w; std::getline(ss, w, ',');) {
      w.erase(0, w.find_first_not_of(' '));
      w.erase(w.find_last_not_of(' ') + 1);
      if (!w.empty()) out.push_back({w, slug(heading)});
    }
  }
  return out;
}

// The prose of a lesson: fenced code, inline code and link targets removed.
std::string prose_of(const fs::path& md) {
  std::string out;
  bool code = false;
  for (const std::string& line : lines_of(md)) {
    if (line.rfind("```", 0) == 0) code = !code;
    if (code) continue;
    out += std::regex_replace(without_code_spans(line), std::regex(R"(\]\([^)]*\))"), "]") + "\n";
  }
  return out;
}

bool uses(const std::string& prose, const std::string& word) {
  std::string pattern;
  for (char c : word) {  // the word, regex-escaped
    if (std::string(".^$|()[]{}*+?\\/").find(c) != std::string::npos) pattern += '\\';
    pattern += c;
  }
  const bool lower = std::none_of(word.begin(), word.end(), [](unsigned char c) { return std::isupper(c); });
  const auto flags = lower ? std::regex::ECMAScript | std::regex::icase : std::regex::ECMAScript;
  return std::regex_search(prose, std::regex("(^|[^\\w.])" + pattern + "(s|es)?(?![\\w])", flags));
}

}  // namespace

TEST_CASE("docs: the glossary's term matching") {
  CHECK(uses("each warp owns 16 rows", "warp"));
  CHECK(uses("Warps share", "warp"));
  CHECK_FALSE(uses("a warpgroup of four", "warp"));
  CHECK(uses("the SMs of the H200", "SM"));
  CHECK_FALSE(uses("an sm_90a build", "SM"));
  CHECK(uses("issued by mma.sync here", "mma.sync"));
  CHECK_FALSE(uses("mma_sync", "mma.sync"));
}

TEST_CASE("docs: every glossary term a lesson uses is defined in place or linked to the glossary") {
  const fs::path root = FA_SOURCE_DIR;
  const fs::path glossary = root / "docs" / "glossary.md";
  REQUIRE(fs::exists(glossary));
  const std::vector<Term> terms = glossary_terms(glossary);
  REQUIRE(terms.size() >= 30);
  std::vector<fs::path> lessons;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && std::regex_match(e.path().filename().string(), std::regex(R"(^\d\d_\w+$)")) &&
        fs::exists(e.path() / "README.md"))
      lessons.push_back(e.path() / "README.md");
  for (const char* doc : {"cuda_primer.md", "pytorch.md", "decode.md", "variants.md", "fp8.md"})
    if (fs::exists(root / "docs" / doc)) lessons.push_back(root / "docs" / doc);
  REQUIRE(lessons.size() >= 7);
  const std::set<std::string> ids = anchors(glossary);
  for (const Term& t : terms) CHECK(ids.count(t.anchor) == 1);
  int64_t checked = 0;
  for (const fs::path& md : lessons) {
    std::ifstream f(md);
    const std::string raw(std::istreambuf_iterator<char>(f), {});
    const std::string prose = prose_of(md);
    for (const Term& t : terms) {
      if (!uses(prose, t.word)) continue;
      INFO(fs::relative(md, root).string() << " uses '" << t.word << "': link glossary.md#" << t.anchor
                                           << " once, or define it in bold (**" << t.word << "**)");
      const bool linked = raw.find("glossary.md#" + t.anchor + ")") != std::string::npos;
      const bool defined = raw.find("**" + t.word + "**") != std::string::npos;
      CHECK((linked || defined));
      ++checked;
    }
  }
  CHECK(checked >= 50);
}
