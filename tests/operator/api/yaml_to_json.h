// Test helper: YAML (crds/samples/*.yaml, manifests) to nlohmann::json the way the API server
// would store it: plain scalars typed by the YAML 1.2 core schema (null, bool, int, float),
// quoted scalars strings. Header-only; shared by tests/operator/api and tests/operator/reconcile.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace kinfer::testing {

inline nlohmann::json YamlNodeToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : node) out.push_back(YamlNodeToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& entry : node)
        out[entry.first.as<std::string>()] = YamlNodeToJson(entry.second);
      return out;
    }
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (std::regex_match(text, kInt)) {
    int64_t v = 0;
    const char* begin = text.data() + (text[0] == '+' ? 1 : 0);
    auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), v);
    if (ec == std::errc() && ptr == text.data() + text.size()) return v;
  }
  if (std::regex_match(text, kFloat)) return std::stod(text);
  return text;
}

inline nlohmann::json YamlToJson(const std::string& text) {
  return YamlNodeToJson(YAML::Load(text));
}

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json LoadYamlFile(const std::string& path) {
  return YamlToJson(ReadTextFile(path));
}

}  // namespace kinfer::testing
