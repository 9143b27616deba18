// The docs test (ctest label `docs`): the course's Markdown files are part of the product, so
// every relative link in them must lead somewhere. For each .md file of the repository (build
// folders and hidden folders excepted):
//   - every link target `[text](path)` that is not a URL exists, relative to the file;
//   - every `#anchor` (alone, or after a path to a .md file) names a heading of that file, with
//     GitHub's rule for heading ids (lower case; letters, digits, '-' and '_' kept; spaces become
//     '-'; everything else dropped).
// Links inside fenced code blocks and inline code spans are not links and are skipped.
// FA_SOURCE_DIR is the repository root (set by CMake).
#include <doctest/doctest.h>

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
